"""One keep-alive HTTP/1.1 connection to an engine, its answers parsed by httptools.

A connection carries one request at a time and is pooled again only when its exchange
ended cleanly: the whole request was written, the whole answer read, the engine said
keep-alive, and nothing arrived that nobody asked for. Bytes after an answer's end, an
answer before the request was written, or an upgrade mean the two ends no longer agree
on where messages start: such a connection is closed, never reused, or the next client
could read another request's answer.
"""

from __future__ import annotations

import asyncio
from typing import Protocol, cast

import httptools

from flexinfer_proxy.transport.base import RequestFailedError
from flexinfer_proxy.transport.h1_answer import H1Answer, ReadDeadline


class ConnectionPool(Protocol):
    """Where a connection goes when its exchange ends (``HostPool``)."""

    def put(self, conn: H1Connection) -> None:
        """Keep ``conn`` for the next request."""

    def discard(self, conn: H1Connection) -> None:
        """``conn`` is closed: forget it."""


class H1Connection(asyncio.Protocol):
    """A pooled connection; ``begin`` starts an exchange, the answer is its ``H1Answer``."""

    def __init__(self, pool: ConnectionPool, read_timeout: float) -> None:
        self.pool = pool
        self.loop = asyncio.get_running_loop()
        self.deadline = ReadDeadline(self.loop, read_timeout)
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.answer: H1Answer | None = None
        self.head: asyncio.Future[None] | None = None
        self.received = False
        """Any byte of the current answer arrived (a request then is never resent)."""
        self.request_written = False
        self.closed = False
        self.reading_paused = False
        self.idle_since = 0.0
        self._ended = False
        """The current answer ended: any further byte is one nobody asked for."""
        self._interim = False
        self._framed = False
        """The answer has a Content-Length or Transfer-Encoding: its end is not the EOF."""
        self._eof_body = False
        self._drain: asyncio.Future[None] | None = None

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Keep the transport (uvloop's do not subclass asyncio.Transport, hence a cast)."""
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        """Feed the parser; unsolicited or malformed bytes end the connection."""
        if self.answer is None or self._ended:
            self.close()  # bytes nobody asked for: the connection is out of step
            return
        self.received = True
        try:
            self.parser.feed_data(data)
        except (httptools.HttpParserError, _OutOfStepError) as exc:
            self._fail(RequestFailedError(f"invalid HTTP answer: {exc}"))
            self.close()

    def eof_received(self) -> bool:
        """The engine half-closed: let the transport close (an EOF-framed body ends)."""
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        """End the exchange: an EOF-framed body is complete, anything else failed."""
        self.closed = True
        self.deadline.cancel()
        self.pool.discard(self)
        answer = self.answer
        if answer is not None and self._eof_body and answer.status and not self._ended:
            self._end_answer(None)
        else:
            self._fail(exc or ConnectionResetError("the upstream closed the connection"))
        drain = self._drain
        if drain is not None and not drain.done():
            drain.set_exception(ConnectionResetError("the upstream closed the connection"))

    def pause_writing(self) -> None:
        """The engine reads slower than we write."""
        self._drain = self.loop.create_future()

    def resume_writing(self) -> None:
        """The engine caught up."""
        drain, self._drain = self._drain, None
        if drain is not None and not drain.done():
            drain.set_result(None)

    # httptools callbacks
    def on_message_begin(self) -> None:
        """A message starts; a second one for one request means the ends are out of step."""
        if self._ended:
            raise _OutOfStepError("the upstream sent bytes after its answer ended")

    def on_header(self, name: bytes, value: bytes) -> None:
        """One answer header (its name lowercased)."""
        answer = self.answer
        if answer is not None and not self._interim:
            name = name.lower()
            answer.headers.append((name, value))
            answer.first.setdefault(name, value)
            if name in _FRAMING:
                self._framed = True

    def on_headers_complete(self) -> None:
        """The answer's head is in: wake the request (interim 1xx heads are skipped)."""
        answer = self.answer
        if answer is None:
            return
        status = self.parser.get_status_code()
        if status == 101:
            raise _OutOfStepError("the upstream switched protocols, which was not asked for")
        if status < 200:
            answer.headers.clear()
            answer.first.clear()
            self._interim = True
            return
        answer.status = status
        answer.reusable = self.parser.should_keep_alive()
        self._eof_body = not self._framed
        head = self.head
        if head is not None and not head.done():
            head.set_result(None)

    def on_body(self, body: bytes) -> None:
        """Answer body bytes."""
        if self.answer is not None:
            self.answer.feed(body)

    def on_message_complete(self) -> None:
        """The answer's body ended (an interim 1xx message ends with its head)."""
        if self._interim:
            self._interim = False
            return
        self._end_answer(None)

    # Used by the transport.
    def begin(self, url: str) -> H1Answer:
        """The answer to the request about to be written on this connection."""
        answer = self.answer = H1Answer(self, url)
        self.received = False
        self.request_written = False
        self._ended = False
        self._interim = False
        self._framed = False
        return answer

    async def drain(self) -> None:
        """Wait while the transport's write buffer is full."""
        if self._drain is not None:
            await self._drain

    def pause_reading(self) -> None:
        """Stop reading from the engine (the client reads slowly)."""
        if self.transport is not None and not self.reading_paused:
            self.reading_paused = True
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        """Read from the engine again."""
        if self.transport is not None and self.reading_paused:
            self.reading_paused = False
            self.transport.resume_reading()

    def finished_with(self, answer: H1Answer) -> None:
        """The answer's reader is done: pool the connection if the exchange ended cleanly."""
        if answer is not self.answer:
            return
        clean = answer.complete() and answer.reusable and self.request_written
        self.answer = None
        if clean and not self.closed:
            self.resume_reading()
            self.pool.put(self)
        else:
            self.close()

    def close(self) -> None:
        """Close the connection (it is never pooled again)."""
        self.closed = True
        self.pool.discard(self)
        if self.transport is not None:
            self.transport.close()

    def _end_answer(self, error: BaseException | None) -> None:
        self._ended = True
        if self.answer is not None:
            self.answer.finish(error)

    def _fail(self, exc: BaseException) -> None:
        head = self.head
        if head is not None and not head.done():
            head.set_exception(exc)
        elif self.answer is not None and not self._ended:
            self._end_answer(exc)


_FRAMING = frozenset({b"content-length", b"transfer-encoding"})


class _OutOfStepError(Exception):
    """The engine sent what does not fit the request (raised inside parser callbacks)."""
