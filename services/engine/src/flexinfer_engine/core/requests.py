"""OpenAI request bodies and their translation into prompts and SamplingParams."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from flexinfer_engine.core.config import ModelConfig
from flexinfer_engine.core.messages import STRICT, Message, unreadable_parts
from flexinfer_engine.core.parameters import (
    CHAT_REFUSED,
    COMPLETION_REFUSED,
    InvalidRequestError,
    refuse_unsupported,
)
from flexinfer_engine.core.sampling import SamplingParams
from flexinfer_engine.core.tokenizer import BOS, VOCAB_SIZE, ByteTokenizer, ChatMessage

MAX_STOP_LENGTH = 256
MAX_PROMPTS = 16
MAX_CHOICES = 8


StopSequence = Annotated[str, Field(min_length=1, max_length=MAX_STOP_LENGTH)]
Penalty = Annotated[float, Field(ge=-2, le=2)]


class StreamOptions(BaseModel):
    """``stream_options``: include_usage adds a final chunk with usage. There is no
    obfuscation padding to include or leave out, so include_obfuscation changes nothing."""

    model_config = STRICT
    include_usage: bool | None = None
    include_obfuscation: bool | None = None


class _Common(BaseModel):
    """Fields both endpoints share, with OpenAI's types and ranges (see ``parameters``)."""

    model_config = STRICT

    model: str = Field(min_length=1)
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    n: int | None = Field(default=None, ge=1, le=MAX_CHOICES)
    stop: StopSequence | list[StopSequence] | None = None
    seed: int | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    presence_penalty: Penalty | None = None
    frequency_penalty: Penalty | None = None
    logit_bias: dict[str, Annotated[float, Field(ge=-100, le=100)]] | None = None
    user: str | None = None
    ignore_eos: bool = False
    """vLLM's extension: generate max_tokens tokens even past the end-of-text token."""

    @property
    def choices(self) -> int:
        """How many choices each prompt gets."""
        return 1 if self.n is None else self.n


class CompletionRequest(_Common):
    """POST /v1/completions."""

    prompt: str | list[str] | list[int] | list[list[int]]
    echo: bool | None = None
    logprobs: int | None = Field(default=None, ge=0, le=5)
    best_of: int | None = Field(default=None, ge=1, le=20)
    suffix: str | None = None


_ToolChoice = Literal["none", "auto", "required"] | dict[str, Any]


class ChatCompletionRequest(_Common):
    """POST /v1/chat/completions."""

    messages: list[Message] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    logprobs: bool | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    tools: list[dict[str, Any]] | None = None
    tool_choice: _ToolChoice | None = None
    parallel_tool_calls: bool | None = None
    functions: list[dict[str, Any]] | None = None
    function_call: Literal["none", "auto"] | dict[str, Any] | None = None
    response_format: dict[str, Any] | None = None
    audio: dict[str, Any] | None = None
    modalities: list[Literal["text", "audio"]] | None = None
    prediction: dict[str, Any] | None = None
    reasoning_effort: str | None = None
    verbosity: Literal["low", "medium", "high"] | None = None
    web_search_options: dict[str, Any] | None = None
    moderation: dict[str, Any] | None = None
    store: bool | None = None
    metadata: dict[str, str] | None = None
    safety_identifier: str | None = None
    service_tier: Literal["auto", "default", "flex", "scale", "priority", "fast"] | None = None
    prompt_cache_key: str | None = None
    prompt_cache_retention: Literal["in_memory", "24h"] | None = None
    prompt_cache_options: dict[str, Any] | None = None


def check_parameters(request: CompletionRequest | ChatCompletionRequest) -> None:
    """InvalidRequestError for a parameter this engine cannot honour, or one that needs
    another (OpenAI's rules: stream_options needs stream)."""
    if isinstance(request, ChatCompletionRequest):
        refuse_unsupported(request, CHAT_REFUSED)
        unreadable = unreadable_parts(request.messages)
        if unreadable is not None:
            param, kind = unreadable
            raise InvalidRequestError(
                f"Unsupported content: '{kind}' parts cannot be read by this engine, "
                "which takes text only.",
                param=param,
                code="unsupported_parameter",
            )
    else:
        refuse_unsupported(request, COMPLETION_REFUSED)
    if request.stream_options is not None and not request.stream:
        raise InvalidRequestError(
            "stream_options is only allowed when stream is true", param="stream_options"
        )


def completion_prompts(request: CompletionRequest, tokenizer: ByteTokenizer) -> list[list[int]]:
    """Token ids of every prompt of a completion request."""
    prompt = request.prompt
    if isinstance(prompt, str):
        return [tokenizer.encode(prompt)]
    if not prompt:
        raise InvalidRequestError("prompt must not be empty", param="prompt")
    if len(prompt) > MAX_PROMPTS:
        raise InvalidRequestError(f"at most {MAX_PROMPTS} prompts per request", param="prompt")
    first = prompt[0]
    if isinstance(first, str):
        return [tokenizer.encode(p) for p in prompt if isinstance(p, str)]
    if isinstance(first, int):
        return [_check_ids([p for p in prompt if isinstance(p, int)])]
    return [_check_ids(p) for p in prompt if isinstance(p, list)]


def _check_ids(ids: list[int]) -> list[int]:
    if not ids or any(not 0 <= i < VOCAB_SIZE for i in ids):
        raise InvalidRequestError(f"token ids must be in [0, {VOCAB_SIZE})", param="prompt")
    return ids if ids[0] == BOS else [BOS, *ids]


def chat_prompt(request: ChatCompletionRequest, tokenizer: ByteTokenizer) -> list[int]:
    """Token ids of a conversation rendered with the chat template."""
    messages = [ChatMessage(m.role, m.text()) for m in request.messages]
    return tokenizer.encode(tokenizer.format_chat(messages))


def sampling_params(
    request: CompletionRequest | ChatCompletionRequest,
    prompts: list[list[int]],
    config: ModelConfig,
    *,
    default_max_tokens: int,
) -> SamplingParams:
    """Validated SamplingParams; the prompt plus max_tokens must fit the context."""
    check_parameters(request)
    context = config.max_position_embeddings
    longest = max(len(p) for p in prompts)
    if longest >= context:
        raise InvalidRequestError(
            f"the prompt is {longest} tokens but this model's context is {context} tokens",
            param="messages" if isinstance(request, ChatCompletionRequest) else "prompt",
        )
    requested, limit_name = request.max_tokens, "max_tokens"
    if isinstance(request, ChatCompletionRequest) and request.max_completion_tokens is not None:
        requested, limit_name = request.max_completion_tokens, "max_completion_tokens"
    max_tokens = requested if requested is not None else min(default_max_tokens, context - longest)
    if longest + max_tokens > context:
        raise InvalidRequestError(
            f"{limit_name} is too large: {max_tokens} + {longest} prompt tokens exceeds the "
            f"context of {context} tokens",
            param=limit_name,
        )
    stop = request.stop
    stops = () if stop is None else (stop,) if isinstance(stop, str) else tuple(stop)
    if len(stops) > 4:
        raise InvalidRequestError("at most 4 stop sequences are allowed", param="stop")
    return SamplingParams(
        max_tokens=max_tokens,
        temperature=1.0 if request.temperature is None else request.temperature,
        top_p=1.0 if request.top_p is None else request.top_p,
        n=request.choices,
        stop=stops,
        seed=None if request.seed is None else request.seed % 2**63,
        ignore_eos=request.ignore_eos,
    )
