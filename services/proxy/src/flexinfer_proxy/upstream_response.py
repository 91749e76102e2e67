"""An upstream answer whose head has arrived: its body streams in with flow control.

Filled by the connection's httptools callbacks (``_feed``/``_finish``); read once through
``aiter_raw`` or, when it is already complete, ``read_buffered``. Buffered bytes beyond
the high-water mark pause reading from the engine until the client catches up.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from flexinfer_proxy.upstream import UpstreamConnection

_HIGH_WATER = 256 * 1024
"""Buffered answer bytes beyond which reading from the engine pauses (slow client)."""


class UpstreamReadError(Exception):
    """The engine's answer broke off mid-body."""


class ResponseListener(Protocol):
    """Told of an answer's progress from the connection's callbacks (the fast path)."""

    def upstream_head(self, response: UpstreamResponse) -> None:
        """The status and headers arrived."""

    def upstream_done(self, response: UpstreamResponse) -> None:
        """The answer ended: complete, or failed (``response.error``)."""


class Expirable(Protocol):
    """What a read deadline fails: an ``asyncio.Future`` or a fast-path forward."""

    def done(self) -> bool:
        """Whether the wait is over."""

    def set_exception(self, exception: BaseException) -> None:
        """The deadline passed."""


class UpstreamResponse:
    """An answer whose head has arrived; the body streams through ``aiter_raw``."""

    __slots__ = (
        "_buffered",
        "_chunks",
        "_conn",
        "_done",
        "_error",
        "_waiter",
        "chunked",
        "content_length",
        "content_type",
        "headers",
        "keep_alive",
        "listener",
        "status_code",
        "url",
    )

    def __init__(self, conn: UpstreamConnection, url: str) -> None:
        self.url = url
        self.status_code = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.keep_alive = False
        self._conn: UpstreamConnection | None = conn
        self._chunks: deque[bytes] = deque()
        self._buffered = 0
        self._done = False
        self._error: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None
        self.listener: ResponseListener | None = None
        self.content_length: bytes | None = None
        self.content_type: bytes | None = None
        self.chunked = False
        """The three headers framing and typing the body, noted while the head is parsed."""

    @property
    def error(self) -> BaseException | None:
        """Why the answer failed, once it did."""
        return self._error

    @property
    def complete(self) -> bool:
        """The whole body arrived intact (it may still be buffered here)."""
        return self._done and self._error is None

    def read_buffered(self) -> bytes:
        """Take every buffered body byte now (used when the answer is already complete)."""
        chunks = self._chunks
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        chunks.clear()
        self._buffered = 0
        return data

    async def aiter_raw(self) -> AsyncIterator[bytes]:
        """Body chunks as they arrive; UpstreamReadError if the engine breaks off."""
        chunks = self._chunks
        while True:
            if chunks:
                chunk = chunks.popleft()
                self._buffered -= len(chunk)
                conn = self._conn
                if conn is not None and conn.reading_paused and self._buffered < _HIGH_WATER // 2:
                    conn.resume_reading()
                yield chunk
            elif self._error is not None:
                raise UpstreamReadError(f"upstream {self.url} broke off: {self._error!r}")
            elif self._done:
                return
            else:
                await self._wait()

    async def aclose(self) -> None:
        """Give the connection back to the pool when reusable, else close it."""
        self.close()

    def close(self) -> None:
        """``aclose`` for callers outside a coroutine."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        conn.response = None
        if self._done and self.keep_alive and self._error is None:
            conn.release()
        else:
            conn.close()

    async def _wait(self) -> None:
        conn = self._conn
        loop = conn.loop if conn is not None else asyncio.get_running_loop()
        waiter = self._waiter = loop.create_future()
        if conn is not None:
            conn.deadline.watch(waiter)
        try:
            await waiter
        finally:
            self._waiter = None
            if conn is not None:
                conn.deadline.clear()

    # Called by the connection.
    def _feed(self, data: bytes) -> None:
        self._chunks.append(data)
        self._buffered += len(data)
        if self._buffered > _HIGH_WATER and self._conn is not None:
            self._conn.pause_reading()
        self._wake()

    def _finish(self, error: BaseException | None = None) -> None:
        if error is not None and not self._done:
            self._error = error
        self._done = True
        self._wake()
        if self.listener is not None:
            self.listener.upstream_done(self)

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


def expire(waiter: Expirable) -> None:
    """Fail ``waiter`` with a read timeout (a timer callback)."""
    if not waiter.done():
        waiter.set_exception(TimeoutError("no data from the upstream within the read timeout"))


class ReadDeadline:
    """The read timeout of one connection, with one lazy timer.

    A uvloop timer costs about 2 µs to arm and cancel, and the hot path waited on one per
    request. Here watching a waiter is an attribute store; the one timer re-checks the
    latest deadline when it fires and re-arms itself only while someone still waits.
    """

    __slots__ = ("_deadline", "_loop", "_timeout", "_timer", "_waiter")

    def __init__(self, loop: asyncio.AbstractEventLoop, timeout: float) -> None:
        self._loop = loop
        self._timeout = timeout
        self._deadline = 0.0
        self._waiter: Expirable | None = None
        self._timer: asyncio.TimerHandle | None = None

    def watch(self, waiter: Expirable) -> None:
        """Fail ``waiter`` with TimeoutError unless it is done within the read timeout."""
        self._waiter = waiter
        self._deadline = self._loop.time() + self._timeout
        if self._timer is None:
            self._timer = self._loop.call_later(self._timeout, self._check)

    def clear(self) -> None:
        """Nobody waits any more."""
        self._waiter = None

    def cancel(self) -> None:
        """The connection is gone: drop the timer."""
        self._waiter = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _check(self) -> None:
        self._timer = None
        waiter = self._waiter
        if waiter is None or waiter.done():
            return
        left = self._deadline - self._loop.time()
        if left > 0:
            self._timer = self._loop.call_later(left, self._check)
        else:
            expire(waiter)
