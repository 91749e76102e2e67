"""OpenAI request bodies and their translation into prompts and SamplingParams."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from flexinfer_common.errors import ConfigError
from flexinfer_engine.core.config import ModelConfig
from flexinfer_engine.core.sampling import SamplingParams
from flexinfer_engine.core.tokenizer import BOS, VOCAB_SIZE, ByteTokenizer, ChatMessage

MAX_STOP_LENGTH = 256
MAX_PROMPTS = 16


class InvalidRequestError(ConfigError):
    """The request is well-formed JSON but asks for something impossible (HTTP 400)."""

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


StopSequence = Annotated[str, Field(min_length=1, max_length=MAX_STOP_LENGTH)]


class StreamOptions(BaseModel):
    """``stream_options``: include_usage adds a final chunk with usage."""

    model_config = ConfigDict(extra="ignore")
    include_usage: bool = False


class _Common(BaseModel):
    """Fields both endpoints share, with OpenAI's ranges."""

    model_config = ConfigDict(extra="ignore")

    model: str = Field(min_length=1)
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    n: int = Field(default=1, ge=1, le=8)
    stop: StopSequence | list[StopSequence] | None = Field(default=None)
    seed: int | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    presence_penalty: float = Field(default=0.0, ge=-2, le=2)
    frequency_penalty: float = Field(default=0.0, ge=-2, le=2)
    logit_bias: dict[str, float] | None = None
    user: str | None = None
    ignore_eos: bool = False


class CompletionRequest(_Common):
    """POST /v1/completions."""

    prompt: str | list[str] | list[int] | list[list[int]]
    echo: bool = False
    logprobs: int | None = None
    best_of: int | None = None
    suffix: str | None = None


class TextPart(BaseModel):
    """A text content part of a chat message."""

    type: Literal["text"]
    text: str


class Message(BaseModel):
    """One chat message; content is a string or a list of text parts."""

    model_config = ConfigDict(extra="ignore")
    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[TextPart] | None = None
    name: str | None = None

    def text(self) -> str:
        """The message's text, parts joined."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)


class ChatCompletionRequest(_Common):
    """POST /v1/chat/completions."""

    messages: list[Message] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    logprobs: bool | None = None
    top_logprobs: int | None = None


def _unsupported(request: _Common) -> None:
    checks: list[tuple[str, object]] = [
        ("presence_penalty", request.presence_penalty),
        ("frequency_penalty", request.frequency_penalty),
        ("logit_bias", request.logit_bias),
        ("logprobs", getattr(request, "logprobs", None)),
        ("top_logprobs", getattr(request, "top_logprobs", None)),
        ("echo", getattr(request, "echo", False)),
        ("suffix", getattr(request, "suffix", None)),
    ]
    for name, value in checks:
        if value:
            raise InvalidRequestError(f"{name} is not supported by this engine", param=name)
    best_of = getattr(request, "best_of", None)
    if best_of is not None and best_of != request.n:
        raise InvalidRequestError("best_of other than n is not supported", param="best_of")
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
    request: _Common, prompts: list[list[int]], config: ModelConfig, *, default_max_tokens: int
) -> SamplingParams:
    """Validated SamplingParams; the prompt plus max_tokens must fit the context."""
    _unsupported(request)
    context = config.max_position_embeddings
    longest = max(len(p) for p in prompts)
    if longest >= context:
        raise InvalidRequestError(
            f"the prompt is {longest} tokens but this model's context is {context} tokens",
            param="messages" if isinstance(request, ChatCompletionRequest) else "prompt",
        )
    requested = request.max_tokens
    if isinstance(request, ChatCompletionRequest) and request.max_completion_tokens is not None:
        requested = request.max_completion_tokens
    max_tokens = requested if requested is not None else min(default_max_tokens, context - longest)
    if longest + max_tokens > context:
        raise InvalidRequestError(
            f"max_tokens is too large: {max_tokens} + {longest} prompt tokens exceeds the "
            f"context of {context} tokens",
            param="max_tokens",
        )
    stop = request.stop
    stops = () if stop is None else (stop,) if isinstance(stop, str) else tuple(stop)
    if len(stops) > 4:
        raise InvalidRequestError("at most 4 stop sequences are allowed", param="stop")
    return SamplingParams(
        max_tokens=max_tokens,
        temperature=1.0 if request.temperature is None else request.temperature,
        top_p=1.0 if request.top_p is None else request.top_p,
        n=request.n,
        stop=stops,
        seed=None if request.seed is None else request.seed % 2**63,
        ignore_eos=request.ignore_eos,
    )
