"""OpenAI response and stream-chunk bodies, built from engine events."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from flexinfer_engine.core.engine import Delta, Event, Finished


@dataclass
class ResponseBuilder:
    """Builds the bodies of one chat ("chat") or text ("text") completion response."""

    kind: str
    model: str
    prompt_tokens: int
    choices: int
    fingerprint: str
    include_usage: bool = False
    id: str = ""
    created: int = field(default_factory=lambda: int(time.time()))
    texts: list[str] = field(default_factory=list)
    reasons: list[str | None] = field(default_factory=list)
    completion_tokens: int = 0

    def __post_init__(self) -> None:
        prefix = "chatcmpl" if self.kind == "chat" else "cmpl"
        self.id = self.id or f"{prefix}-{uuid.uuid4().hex}"
        self.texts = [""] * self.choices
        self.reasons = [None] * self.choices

    def add(self, event: Event) -> None:
        """Record an event (text, finish reason, token counts)."""
        if isinstance(event, Delta):
            self.texts[event.index] += event.text
            self.completion_tokens += event.tokens
        else:
            self.reasons[event.index] = event.finish_reason

    def usage(self) -> dict[str, int]:
        """The usage object."""
        total = self.prompt_tokens + self.completion_tokens
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": total,
        }

    def _envelope(self, streaming: bool) -> dict[str, Any]:
        suffix = ".chunk" if streaming and self.kind == "chat" else ""
        obj = ("chat.completion" if self.kind == "chat" else "text_completion") + suffix
        return {
            "id": self.id,
            "object": obj,
            "created": self.created,
            "model": self.model,
            "system_fingerprint": self.fingerprint,
        }

    def final(self) -> dict[str, Any]:
        """The non-streaming response body."""
        choices: list[dict[str, Any]] = []
        for index, (text, reason) in enumerate(zip(self.texts, self.reasons, strict=True)):
            choice: dict[str, Any] = {"index": index, "logprobs": None, "finish_reason": reason}
            if self.kind == "chat":
                choice["message"] = {"role": "assistant", "content": text}
            else:
                choice["text"] = text
            choices.append(choice)
        return {**self._envelope(False), "choices": choices, "usage": self.usage()}

    def _chunk(self, index: int, content: dict[str, Any], reason: str | None) -> dict[str, Any]:
        choice: dict[str, Any] = {"index": index, "logprobs": None, "finish_reason": reason}
        if self.kind == "chat":
            choice["delta"] = content
        else:
            choice["text"] = content.get("content", "")
        body = {**self._envelope(True), "choices": [choice]}
        if self.include_usage:
            body["usage"] = None
        return body

    def opening_chunks(self) -> Iterator[dict[str, Any]]:
        """Chat streams announce the assistant role first, once per choice."""
        if self.kind == "chat":
            for index in range(self.choices):
                yield self._chunk(index, {"role": "assistant", "content": ""}, None)

    def chunks(self, event: Event) -> Iterator[dict[str, Any]]:
        """Stream chunks for one event (none for a token that completed no text)."""
        self.add(event)
        if isinstance(event, Delta):
            if event.text:
                yield self._chunk(event.index, {"content": event.text}, None)
        elif isinstance(event, Finished):
            yield self._chunk(event.index, {}, event.finish_reason)

    def closing_chunks(self) -> Iterator[dict[str, Any]]:
        """The usage chunk (empty choices) when the client asked for it."""
        if self.include_usage:
            yield {**self._envelope(True), "choices": [], "usage": self.usage()}
