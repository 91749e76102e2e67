"""An answer on one of the h1 transport's connections: its body streams in with flow control.

Filled by the connection's httptools callbacks (``feed``/``finish``); read once through
``read`` or ``stream``. Buffered bytes beyond the high-water mark pause reading from the
engine until the client catches up.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from typing import Protocol

from flexinfer_common.http1.lazy_timer import LazyTimer
from flexinfer_proxy.transport.base import AnswerBrokenError, UpstreamAnswer

_HIGH_WATER = 256 * 1024
"""Buffered answer bytes beyond which reading from the engine pauses (slow client)."""


class AnswerSource(Protocol):
    """What an answer needs of its connection (``H1Connection``)."""

    reading_paused: bool
    deadline: ReadDeadline

    def pause_reading(self) -> None:
        """Stop reading from the engine."""

    def resume_reading(self) -> None:
        """Read from the engine again."""

    def finished_with(self, answer: H1Answer) -> None:
        """The answer was read or dropped: pool the connection, or close it."""


class H1Answer(UpstreamAnswer):
    """An answer whose head has arrived; the body streams through ``stream``."""

    __slots__ = (
        "_buffered",
        "_chunks",
        "_conn",
        "_done",
        "_error",
        "_waiter",
        "first",
        "headers",
        "reusable",
        "status",
        "url",
    )

    def __init__(self, conn: AnswerSource, url: str) -> None:
        self.url = url
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.first: dict[bytes, bytes] = {}
        """The first value of each header, by (lowercase) name."""
        self.reusable = False
        """The connection may carry another request once this answer ends intact."""
        self._conn: AnswerSource | None = conn
        self._chunks: deque[bytes] = deque()
        self._buffered = 0
        self._done = False
        self._error: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None

    def header(self, name: bytes) -> bytes | None:
        """The value of header ``name`` (lowercase), if present."""
        return self.first.get(name)

    @property
    def error(self) -> BaseException | None:
        """Why the answer failed, once it did."""
        return self._error

    def complete(self) -> bool:
        """The whole body arrived intact (it may still be buffered here)."""
        return self._done and self._error is None

    def body_now(self) -> bytes | None:
        """The whole body if it arrived intact already, else None."""
        if not self.complete():
            return None
        chunks = self._chunks
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        chunks.clear()
        self._buffered = 0
        return data

    async def read(self) -> bytes:
        """The whole body."""
        body = self.body_now()
        if body is None:
            return b"".join([chunk async for chunk in self.stream()])
        return body

    async def stream(self) -> AsyncIterator[bytes]:
        """Body chunks as they arrive; AnswerBrokenError if the engine breaks off."""
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
                raise AnswerBrokenError(f"upstream {self.url} broke off: {self._error!r}")
            elif self._done:
                return
            else:
                try:
                    await self._wait()
                except TimeoutError as exc:
                    self.finish(exc)
                    raise AnswerBrokenError(f"upstream {self.url}: {exc}") from exc

    async def aclose(self) -> None:
        """Give the connection back to the pool when reusable, else close it."""
        self.close()

    def close(self) -> None:
        """``aclose`` for callers outside a coroutine."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.finished_with(self)

    async def _wait(self) -> None:
        conn = self._conn
        waiter = self._waiter = asyncio.get_running_loop().create_future()
        if conn is not None:
            conn.deadline.watch(waiter)
        try:
            await waiter
        finally:
            self._waiter = None
            if conn is not None:
                conn.deadline.clear()

    # Called by the connection.
    def feed(self, data: bytes) -> None:
        """Body bytes arrived."""
        self._chunks.append(data)
        self._buffered += len(data)
        if self._buffered > _HIGH_WATER and self._conn is not None:
            self._conn.pause_reading()
        self._wake()

    def finish(self, error: BaseException | None = None) -> None:
        """The body ended: intact, or broken by ``error``."""
        if error is not None and not self._done:
            self._error = error
        self._done = True
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


class ReadDeadline:
    """The read timeout of one connection: watching a waiter moves one lazy timer."""

    __slots__ = ("_timer", "_waiter")

    def __init__(self, loop: asyncio.AbstractEventLoop, timeout: float) -> None:
        self._waiter: asyncio.Future[None] | None = None
        self._timer = LazyTimer(loop, timeout, self._expired)

    def watch(self, waiter: asyncio.Future[None]) -> None:
        """Fail ``waiter`` with TimeoutError unless it is done within the read timeout."""
        self._waiter = waiter
        self._timer.start()

    def clear(self) -> None:
        """Nobody waits any more."""
        self._waiter = None
        self._timer.stop()

    def cancel(self) -> None:
        """The connection is gone: drop the timer."""
        self._waiter = None
        self._timer.cancel()

    def _expired(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(TimeoutError("no data from the upstream within the read timeout"))
