"""Request bodies read only as far as needed: a bounded prefix, then the rest streamed."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from starlette.types import Receive

from flexinfer_common.errors import FlexInferError


class ClientGoneError(Exception):
    """The client disconnected before its body was read."""


class BodyTooLargeError(FlexInferError):
    """413: the request body exceeds max_body_bytes."""

    code = "request_too_large"


class BodyTimeoutError(FlexInferError):
    """408: the client sent its body too slowly."""

    code = "request_timeout"


def _expire(task: asyncio.Task[Any], expired: list[bool]) -> None:
    expired.append(True)
    task.cancel()


async def _receive_body(receive: Receive, timeout_s: float) -> tuple[bytes, bool]:
    # One timer handle instead of asyncio.timeout's context manager: this runs on every
    # request, and a body that already arrived returns before the timer matters.
    task = asyncio.current_task()
    assert task is not None
    expired: list[bool] = []
    timer = asyncio.get_running_loop().call_later(timeout_s, _expire, task, expired)
    try:
        message = await receive()
    except asyncio.CancelledError:
        if expired and task.uncancel() == 0:
            raise BodyTimeoutError(f"request body not received within {timeout_s:g}s") from None
        raise
    finally:
        timer.cancel()
    if message["type"] == "http.disconnect":
        raise ClientGoneError
    return message.get("body", b""), bool(message.get("more_body", False))


async def read_prefix(
    receive: Receive, cap: int, limit: int, timeout_s: float
) -> tuple[bytes, bool]:
    """Up to about ``cap`` bytes of the body and whether more follows.

    The whole prefix must arrive within ``timeout_s`` (a slowloris client trickling bytes
    is cut off); BodyTooLargeError once more than ``limit`` bytes arrived.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    chunks: list[bytes] = []
    total = 0
    more = True
    while more and total < cap:
        chunk, more = await _receive_body(receive, max(0.0, deadline - loop.time()))
        total += len(chunk)
        if total > limit:
            raise BodyTooLargeError(f"request body exceeds {limit} bytes")
        chunks.append(chunk)
    return (chunks[0] if len(chunks) == 1 else b"".join(chunks)), more


class BodyStream:
    """The forwarded body: a (possibly rewritten) prefix, then the client's remaining bytes.

    Iterated once by the upstream client. ``started`` tells whether anything was sent (a
    failed connect can then be retried elsewhere); ``done`` is set once the client's body
    is fully read, after which someone else may watch ``receive`` for a disconnect.
    """

    def __init__(
        self, prefix: bytes, receive: Receive, *, received: int, limit: int, idle_s: float
    ) -> None:
        self.prefix = prefix
        self.started = False
        self.done = asyncio.Event()
        self._receive = receive
        self._received = received
        self._limit = limit
        self._idle_s = idle_s

    async def __aiter__(self) -> AsyncIterator[bytes]:
        """The prefix, then each chunk the client sends, as it arrives."""
        self.started = True
        yield self.prefix
        more = True
        while more:
            chunk, more = await _receive_body(self._receive, self._idle_s)
            self._received += len(chunk)
            if self._received > self._limit:
                raise BodyTooLargeError(f"request body exceeds {self._limit} bytes")
            if chunk:
                yield chunk
        self.done.set()
