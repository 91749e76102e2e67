"""What the engine does with each OpenAI request parameter, in tables.

Every field of OpenAI's chat-completions and completions requests falls in one class:

- honoured: the engine does what it asks (the request models' other fields);
- ``ACCEPTED``: meaningful to OpenAI's service but not to a self-hosted engine; accepted
  so that clients written for OpenAI keep working, and the reason is written here;
- ``*_REFUSED``: a feature this engine does not have. Its "off" values (``None``,
  ``false``, ``0``, an empty map, ``{"type": "text"}``...) are accepted; any other value
  is a 400 naming the parameter, never silently ignored.

A member OpenAI does not define is a 400 too (``Unrecognized request argument``), as
OpenAI answers it. ``ignore_eos`` is vLLM's extension and is honoured.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from flexinfer_common.errors import ConfigError


class InvalidRequestError(ConfigError):
    """The request is well-formed JSON but asks for something impossible (HTTP 400)."""

    def __init__(
        self, message: str, *, param: str | None = None, code: str = "invalid_request"
    ) -> None:
        super().__init__(message)
        self.param = param
        self.code = code


@dataclass(frozen=True)
class Refused:
    """A parameter whose feature is missing: ``off(value, request)`` tells the values
    that ask for nothing."""

    off: Callable[[Any, Any], bool]
    reason: str


def _absent(value: Any, request: Any) -> bool:
    return value is None


def _empty(value: Any, request: Any) -> bool:
    return value is None or value in (False, 0, "", {}, [])


def _none_choice(value: Any, request: Any) -> bool:
    return value is None or value == "none"


def _text_format(value: Any, request: Any) -> bool:
    return value is None or value == {"type": "text"}


def _text_only(value: Any, request: Any) -> bool:
    return value is None or value == ["text"]


def _best_of_n(value: Any, request: Any) -> bool:
    return value is None or value == request.choices


_NO_TOOLS = "this engine has no tool calling"
_NO_PENALTIES = "the sampler has no repetition penalties"
_NO_BIAS = "the sampler takes no per-token bias"
_NO_LOGPROBS = "this engine does not report log probabilities"

_SHARED_REFUSED: dict[str, Refused] = {
    "frequency_penalty": Refused(_empty, _NO_PENALTIES),
    "presence_penalty": Refused(_empty, _NO_PENALTIES),
    "logit_bias": Refused(_empty, _NO_BIAS),
}

CHAT_REFUSED: Mapping[str, Refused] = {
    **_SHARED_REFUSED,
    "tools": Refused(_absent, _NO_TOOLS),
    "tool_choice": Refused(_none_choice, _NO_TOOLS),
    "parallel_tool_calls": Refused(_absent, _NO_TOOLS),
    "functions": Refused(_absent, _NO_TOOLS),
    "function_call": Refused(_none_choice, _NO_TOOLS),
    "response_format": Refused(_text_format, "it has no constrained (JSON) decoding"),
    "logprobs": Refused(_empty, _NO_LOGPROBS),
    "top_logprobs": Refused(_absent, _NO_LOGPROBS),
    "audio": Refused(_absent, "it generates text only"),
    "modalities": Refused(_text_only, "it generates text only"),
    "prediction": Refused(_absent, "it has no predicted-output decoding"),
    "reasoning_effort": Refused(_absent, "it is not a reasoning model"),
    "verbosity": Refused(_absent, "it has no verbosity control"),
    "web_search_options": Refused(_absent, "it has no web search"),
    "moderation": Refused(_absent, "it runs no moderation"),
}
"""Chat-completions parameters of features this engine lacks."""

COMPLETION_REFUSED: Mapping[str, Refused] = {
    **_SHARED_REFUSED,
    "logprobs": Refused(_absent, _NO_LOGPROBS),
    "echo": Refused(_empty, "it does not echo the prompt"),
    "suffix": Refused(_empty, "it has no fill-in-the-middle"),
    "best_of": Refused(_best_of_n, "it cannot rank candidates without log probabilities"),
}
"""Completions parameters of features this engine lacks."""

ACCEPTED: Mapping[str, str] = {
    "user": "an end-user id for OpenAI's abuse monitoring; nothing monitors here",
    "safety_identifier": "user's successor for abuse monitoring; nothing monitors here",
    "store": "OpenAI keeps completions for its dashboard; this engine stores nothing",
    "metadata": "tags for stored completions; nothing is stored",
    "service_tier": "OpenAI's pricing and latency tiers; every request is served alike",
    "prompt_cache_key": "a cache-routing hint; this engine keeps no prompt cache",
    "prompt_cache_retention": "a cache lifetime; this engine keeps no prompt cache",
    "prompt_cache_options": "cache breakpoints; this engine keeps no prompt cache",
}
"""Parameters accepted with no effect, and why they have none here."""


def refuse_unsupported(request: Any, table: Mapping[str, Refused]) -> None:
    """InvalidRequestError for the first parameter of ``table`` set to a value it refuses."""
    for name, rule in table.items():
        if not rule.off(getattr(request, name), request):
            raise InvalidRequestError(
                f"Unsupported parameter: '{name}' is not supported by this engine: {rule.reason}.",
                param=name,
                code="unsupported_parameter",
            )
