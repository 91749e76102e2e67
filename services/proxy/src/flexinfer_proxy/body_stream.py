"""Request bodies read only as far as needed: a bounded prefix, then the rest streamed."""

from __future__ import annotations

import asyncio
import types
from collections.abc import AsyncIterator, Awaitable, Coroutine, Generator
from typing import Any

from starlette.types import Message, Receive

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


@types.coroutine
def _resume(coro: Coroutine[Any, Any, Any], yielded: Any) -> Generator[Any, Any, Any]:
    """Go on awaiting ``coro``, whose first step (``send(None)``) yielded ``yielded``."""
    while True:
        try:
            value = yield yielded
        except GeneratorExit:
            coro.close()
            raise
        except BaseException as exc:  # a cancellation from the task: it belongs to coro
            try:
                yielded = coro.throw(exc)
            except StopIteration as stop:
                return stop.value
        else:
            try:
                yielded = coro.send(value)
            except StopIteration as stop:
                return stop.value


async def _timed(waiting: Awaitable[Message], timeout_s: float) -> Message:
    # One timer handle instead of asyncio.timeout's context manager.
    task = asyncio.current_task()
    assert task is not None
    expired: list[bool] = []
    timer = asyncio.get_running_loop().call_later(timeout_s, _expire, task, expired)
    try:
        return await waiting
    except asyncio.CancelledError:
        if expired and task.uncancel() == 0:
            raise BodyTimeoutError(f"request body not received within {timeout_s:g}s") from None
        raise
    finally:
        timer.cancel()


def _receive_now(receive: Receive) -> tuple[Message, None] | tuple[None, Awaitable[Message]]:
    """Start ``receive()``: its message when it did not have to wait, else what to await.

    A body that already arrived (the usual small request) is taken with no timer, task
    lookup or loop lookup: those cost a few µs per request and only matter when waiting.
    """
    coro = receive()
    if not isinstance(coro, types.CoroutineType):
        return None, coro
    try:
        yielded = coro.send(None)
    except StopIteration as stop:
        return stop.value, None
    return None, _resume(coro, yielded)


def _body(message: Message) -> tuple[bytes, bool]:
    if message["type"] == "http.disconnect":
        raise ClientGoneError
    return message.get("body", b""), bool(message.get("more_body", False))


async def _receive_body(receive: Receive, timeout_s: float) -> tuple[bytes, bool]:
    message, waiting = _receive_now(receive)
    if waiting is not None:
        message = await _timed(waiting, timeout_s)
    assert message is not None
    return _body(message)


async def read_prefix(
    receive: Receive, cap: int, limit: int, timeout_s: float
) -> tuple[bytes, bool]:
    """Up to about ``cap`` bytes of the body and whether more follows.

    The whole prefix must arrive within ``timeout_s`` (a slowloris client trickling bytes
    is cut off); BodyTooLargeError once more than ``limit`` bytes arrived.
    """
    loop: asyncio.AbstractEventLoop | None = None
    deadline = 0.0
    chunks: list[bytes] = []
    total = 0
    more = True
    while more and total < cap:
        message, waiting = _receive_now(receive)
        if waiting is not None:
            # The clock starts at the first wait: what came before took no time.
            if loop is None:
                loop = asyncio.get_running_loop()
                deadline = loop.time() + timeout_s
            message = await _timed(waiting, max(0.0, deadline - loop.time()))
        assert message is not None
        chunk, more = _body(message)
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
