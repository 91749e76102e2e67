"""Client-side helpers for fault tests: openai SDK calls that record their outcome, waits.

A fault test counts what every client saw; ``Call`` runs one chat completion (in a thread
when the fault must land while it is in flight) and keeps its outcome: the HTTP status, or
the exception the SDK raised, and when. ``wait_until`` polls a condition with a deadline.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import openai

T = TypeVar("T")

MESSAGES: list[openai.types.chat.ChatCompletionMessageParam] = [
    {"role": "user", "content": "Hello, who are you?"}
]


def wait_until(predicate: Callable[[], T], timeout_s: float, what: str, poll_s: float = 0.05) -> T:
    """The first truthy value of ``predicate()``; AssertionError naming ``what`` at the
    deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:g}s waiting for {what}")
        time.sleep(poll_s)


def sdk(base_url: str, timeout_s: float) -> openai.OpenAI:
    """An openai SDK client of the proxy at ``base_url`` (…/v1), without retries."""
    return openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=timeout_s)


def outcome_of(exc: BaseException) -> str:
    """How a failed call is counted: its HTTP status, or the exception's class."""
    if isinstance(exc, openai.APIStatusError):
        return str(exc.status_code)
    return type(exc).__name__


@dataclass
class Call:
    """One chat completion through the proxy: what it returned or raised, and when."""

    base_url: str
    model: str
    stream: bool = False
    max_tokens: int = 8
    timeout_s: float = 90.0
    extra: dict[str, Any] = field(default_factory=dict)
    started: float = 0.0
    ended: float = 0.0
    first_chunk: float | None = None
    last_chunk: float | None = None
    chunks: int = 0
    text: str = ""
    error: BaseException | None = None
    _thread: threading.Thread | None = None

    @property
    def outcome(self) -> str:
        """``200``, or the status / exception class the SDK raised."""
        return "200" if self.error is None else outcome_of(self.error)

    @property
    def seconds(self) -> float:
        """How long the call took."""
        return self.ended - self.started

    def run(self) -> Call:
        """Make the call here and now; returns self."""
        self.started = time.monotonic()
        try:
            with sdk(self.base_url, self.timeout_s) as client:
                if self.stream:
                    self._stream(client)
                else:
                    reply = client.chat.completions.create(
                        model=self.model, messages=MESSAGES, max_tokens=self.max_tokens,
                        **self.extra,
                    )  # fmt: skip
                    self.text = reply.choices[0].message.content or ""
        except Exception as exc:  # every failure is an outcome to count
            self.error = exc
        self.ended = time.monotonic()
        return self

    def _stream(self, client: openai.OpenAI) -> None:
        stream = client.chat.completions.create(
            model=self.model, messages=MESSAGES, max_tokens=self.max_tokens, stream=True,
            **self.extra,
        )  # fmt: skip
        for chunk in stream:
            self.chunks += 1
            self.last_chunk = time.monotonic()
            if chunk.choices and chunk.choices[0].delta.content:
                if self.first_chunk is None:
                    self.first_chunk = time.monotonic()
                self.text += chunk.choices[0].delta.content

    def start(self) -> Call:
        """Make the call in a background thread; ``join`` waits for it."""
        self._thread = threading.Thread(target=self.run, name=f"call-{self.model}")
        self._thread.start()
        return self

    def join(self, timeout_s: float | None = None) -> Call:
        """Wait for a started call; AssertionError if it is still running after the timeout."""
        assert self._thread is not None, "the call was not started"
        self._thread.join(self.timeout_s + 10 if timeout_s is None else timeout_s)
        assert not self._thread.is_alive(), f"the call to {self.model} hangs"
        return self


def tally(calls: list[Call]) -> dict[str, int]:
    """How many calls ended with each outcome."""
    return dict(Counter(call.outcome for call in calls))
