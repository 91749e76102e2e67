"""The HTTP/1.1 server: one asyncio Protocol per client connection, httptools parsing.

uvicorn's per-request objects (its cycle, scope handling, events, header regexes) were
about a quarter of the proxy's CPU. This protocol plugs into uvicorn as its ``http``
class, so uvicorn still owns the socket, lifespan, signals and graceful shutdown, while
each request costs one ``Exchange``, served by its connection's one task. Proxied
requests go to the pipeline as a ``Downstream``; every other route (health, metrics,
/v1/models) to the ASGI app.

Keep-alive and pipelining (a request parsed while another runs waits in order, with
reading paused), chunked and Content-Length bodies, ``Expect: 100-continue``, flow control
both ways, and a client disconnect that reaches the running request. Malformed requests
get a 400 (431 for an oversized head, counted on the raw bytes as they arrive) before
anything of them runs.
"""

from __future__ import annotations

import asyncio
import logging
import select
from collections import deque
from collections.abc import Coroutine
from typing import Any, cast

import httptools
from uvicorn.config import Config
from uvicorn.server import ServerState

from flexinfer_common.http1.asgi_scope import ConnectionScope
from flexinfer_common.http1.downstream import Pipeline
from flexinfer_common.http1.exchange import Exchange, error_bytes
from flexinfer_common.http1.lazy_timer import LazyTimer
from flexinfer_common.http1.request_head import (
    MAX_HEAD,
    HeadFields,
    ParserCallbacks,
    RejectedError,
    RequestLineCheck,
)
from flexinfer_common.http1.worker import ConnectionWorker

log = logging.getLogger(__name__)

_HIGH_WATER = 64 * 1024
"""Request body bytes buffered beyond which reading from the client pauses."""


class HttpProtocol(asyncio.Protocol):
    """One client connection (uvicorn ``http`` protocol class signature)."""

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        if not config.loaded:
            config.load()
        self.app = config.loaded_app
        self.pipeline: Pipeline | None = getattr(config.app, "pipeline", None)
        self.loop = _loop or asyncio.get_event_loop()
        self.server_state = server_state
        self.connection = ConnectionScope(config.root_path, app_state)
        self.limit_concurrency = config.limit_concurrency
        self.transport: asyncio.Transport | None = None
        self.running: Exchange | None = None
        """The exchange being served now."""
        self.parsing: Exchange | None = None
        """The exchange whose request is being parsed (the running one, or a pipelined one)."""
        self.pipeline_queue: deque[Exchange] = deque()
        self.write_paused = False
        self.reading_paused = False
        self._drain: asyncio.Future[None] | None = None
        # Typed int by uvicorn, but a float where a test wants under a second: read it
        # untyped, or the compiled build (libs/common/hatch_build.py) rejects the float.
        untyped: Any = config
        self._idle = LazyTimer(self.loop, float(untyped.timeout_keep_alive), self._idle_expired)
        """Closes a connection idle (between requests) beyond the keep-alive timeout."""
        self._head = HeadFields()
        self.parser = httptools.HttpRequestParser(ParserCallbacks(self, self._head))
        self._defaults: tuple[object, bytes] = (None, b"")
        self._in_head = False
        self._head_left = MAX_HEAD
        self._discard = False
        self._last = False
        """The request just parsed asked to close the connection: ignore what follows."""
        self._line_check = RequestLineCheck()
        self._refusal: bytes | None = None
        """The answer to malformed bytes after a request still being answered: it is
        written once that answer is, then the connection closes."""
        self._worker = ConnectionWorker(self.loop, server_state.tasks)

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Register the connection; an idle client is dropped after the keep-alive timeout."""
        # uvloop's transports do not subclass asyncio.Transport, hence a cast.
        self.transport = cast(asyncio.Transport, transport)
        self.server_state.connections.add(self)  # type: ignore[arg-type]
        self.connection.connected(transport)
        self._idle.start()

    def connection_lost(self, exc: Exception | None) -> None:
        """Tell the running request (and queued ones) that the client is gone."""
        self.server_state.connections.discard(self)
        self._idle.cancel()
        self._worker.connection_lost()
        for exchange in (self.running, self.parsing, *self.pipeline_queue):
            if exchange is not None:
                exchange.lost()
        self.pipeline_queue.clear()
        self.write_paused = False
        drain, self._drain = self._drain, None
        if drain is not None and not drain.done():
            drain.set_result(None)

    def eof_received(self) -> bool | None:
        """A half-closed client: a body it cut short gets a 400, else the transport closes
        itself (as under uvicorn)."""
        parsing = self.parsing
        cut = parsing is not None and parsing.more_body and not parsing.response_complete
        if not self._discard and (self._in_head or cut):
            self._reject(400, "the request ended before its head or body was complete")
            return True  # _reject closes once the answer is written
        # Else it is a client that left (which a FIN cannot be told from): the transport
        # closes and the running request is cancelled, freeing its queue slot or engine.
        return None

    def data_received(self, data: bytes) -> None:
        """Feed the parser; malformed HTTP gets a 4xx and the connection closes."""
        if self._discard:
            return
        try:
            self._feed(data)
        except httptools.HttpParserUpgrade:
            pass  # no upgrades (websockets) here: the request is served as plain HTTP
        except httptools.HttpParserError as exc:
            # httptools wraps what a callback raised; the original is the context.
            cause = exc.__context__
            if self._last:
                self._discard = True  # bytes after a Connection: close request are ignored
            elif isinstance(cause, RejectedError):
                self._reject(cause.status, str(cause))
            else:
                self._reject(400, f"invalid HTTP request: {exc}")
        except RejectedError as exc:
            self._reject(exc.status, str(exc))

    def _feed(self, data: bytes) -> None:
        if self._line_check.wanted():
            self._line_check.feed(data)
        # The head limit counts raw bytes as they arrive: httptools would otherwise
        # assemble one header of any size before a callback could see it.
        if self._head_budget_applies():
            while len(data) >= self._head_left:
                part, data = data[: self._head_left], data[self._head_left :]
                self._head_left = 0
                self.parser.feed_data(part)
                if self._discard:
                    return
                if self._head_budget_applies() and self._head_left <= 0:
                    raise RejectedError(431, f"the request head exceeds {MAX_HEAD} bytes")
                if not self._head_budget_applies():
                    break
            else:
                self._head_left -= len(data)
        self.parser.feed_data(data)

    def _head_budget_applies(self) -> bool:
        """Between requests and inside a head, bytes count against the head limit."""
        return self._in_head or self.parsing is None or not self.parsing.more_body

    def pause_writing(self) -> None:
        """The client reads slower than we write: writers wait in ``drain``."""
        self.write_paused = True

    def resume_writing(self) -> None:
        """The client caught up."""
        self.write_paused = False
        drain, self._drain = self._drain, None
        if drain is not None and not drain.done():
            drain.set_result(None)

    # httptools callbacks
    def on_message_begin(self) -> None:
        """A new request starts: a new head to fill."""
        self._line_check.between = False
        self._head.begin()
        self._in_head = True
        self.parsing = None

    def on_headers_complete(self) -> None:
        """The head is in: run the request now, or queue it behind the running one."""
        self._idle.stop()
        self._in_head = False
        self._head_left = MAX_HEAD
        parser, head = self.parser, self._head
        version = parser.get_http_version()
        head.check(version)
        keep_alive = version != "1.0" and parser.should_keep_alive()
        method = parser.get_method().decode("ascii")
        exchange = Exchange(
            self, method, head.target, head.headers, head.known, keep_alive, head.expects_continue
        )
        self.parsing = exchange
        if self.running is None:
            self._start(exchange)
        else:
            self.pipeline_queue.append(exchange)
            self.pause_reading()

    def on_body(self, body: bytes) -> None:
        """Request body bytes, for the exchange being parsed."""
        exchange = self.parsing
        if exchange is None or exchange.response_complete:
            return
        exchange.feed(body)
        if exchange.buffered() > _HIGH_WATER:
            self.pause_reading()

    def on_message_complete(self) -> None:
        """The request body is complete."""
        exchange = self.parsing
        if exchange is None:
            return
        exchange.finish_body()
        self._line_check.between = True
        self._last = not exchange.keep_alive
        if exchange.response_complete and exchange is not self.running:
            self._next(exchange)  # the dropped rest of an early-answered request is read

    # Running requests.
    def _start(self, exchange: Exchange) -> None:
        self.running = exchange
        limit = self.limit_concurrency
        if limit is not None and (
            len(self.server_state.connections) > limit or len(self.server_state.tasks) >= limit
        ):
            self.write(error_bytes(503, "the server is at its concurrency limit", close=True))
            self.close()
            return
        pipeline = self.pipeline
        if pipeline is not None and pipeline.handles(exchange.method, exchange.target):
            self._worker.hand(exchange, pipeline.serve)
            return
        try:
            exchange.scope = self.connection.scope(exchange, self.parser.get_http_version())
        except RejectedError as exc:
            self.running = None
            self._reject(exc.status, str(exc))
            return
        self._worker.hand(exchange, self._call_app)

    def _call_app(self, exchange: Exchange) -> Coroutine[Any, Any, None]:
        assert exchange.scope is not None
        return self.app(exchange.scope, exchange.asgi_receive, exchange.asgi_send)  # type: ignore[no-any-return]

    def response_complete(self, exchange: Exchange) -> None:
        """The answer is written: go on with the next request, or close."""
        self.server_state.total_requests += 1
        self.running = None
        if exchange.more_body:
            # Answered before the whole body arrived (413, 408, an early error). Closing
            # now could reset the connection and lose the answer, so the rest of the body
            # is read and dropped, for at most the keep-alive timeout.
            self._idle.start()
            self.resume_reading()
            return
        self._next(exchange)

    def _next(self, done: Exchange) -> None:
        if self._refusal is not None and not self.pipeline_queue:
            self.write(self._refusal)
            self.close()
            return
        if not done.keep_alive:
            self.close()
            return
        if self.pipeline_queue:
            self._start(self.pipeline_queue.popleft())
        else:
            self._idle.start()
        self.resume_reading()

    # Transport helpers, used by the exchanges.
    def write(self, data: bytes) -> None:
        """Write unless the connection is closing."""
        transport = self.transport
        if transport is not None and not transport.is_closing():
            transport.write(data)

    async def drain(self) -> None:
        """Wait until the client reads what was written."""
        if self.write_paused:
            if self._drain is None:
                self._drain = self.loop.create_future()
            await self._drain

    def pause_reading(self) -> None:
        """Stop reading from the client (a full body buffer, or a pipelined request)."""
        if not self.reading_paused and self.transport is not None:
            self.reading_paused = True
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        """Read from the client again, unless a pipelined request waits its turn."""
        if not self.reading_paused or self.transport is None or self.pipeline_queue:
            return
        if self.parsing is None or self.parsing.buffered() <= _HIGH_WATER:
            self.reading_paused = False
            self.transport.resume_reading()

    def close(self) -> None:
        """Close the connection (after what was written)."""
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()

    def default_header_bytes(self) -> bytes:
        """uvicorn's default headers (date, server), encoded once per change (every second)."""
        headers = self.server_state.default_headers
        if self._defaults[0] is not headers:
            encoded = b"".join(b"%s: %s\r\n" % (name, value) for name, value in headers)
            self._defaults = (headers, encoded)
        return self._defaults[1]

    def shutdown(self) -> None:
        """Graceful shutdown (uvicorn): close when idle, else after the running answer."""
        if self.running is None:
            self.close()
        else:
            self.running.keep_alive = False

    # Internals.
    def _idle_expired(self) -> None:
        """Close an idle connection, unless its next request has already arrived.

        After a stall of the event loop (a long GC pause, a starved CPU), the deadline
        can fall due in the same loop turn in which the client's bytes landed: closing
        then resets the connection under a request the client sent in time. Bytes
        waiting unread mean the client is not idle, so the deadline moves on and the
        read that follows serves them (a client cannot keep bytes unread on purpose:
        the loop reads them as soon as it runs). The rest of an early-answered body is
        no such request: its drain stays bounded by the timeout.
        """
        transport = self.transport
        parsing = self.parsing
        draining = parsing is not None and parsing.more_body
        waiting = not (self._discard or draining or self.reading_paused)
        if waiting and transport is not None and _unread_bytes_wait(transport):
            self._idle.start()
            return
        self.close()

    def _reject(self, status: int, message: str) -> None:
        """Answer a malformed request and stop reading; nothing of it runs any further."""
        log.debug("rejecting a request: %s", message)
        self._discard = True
        transport = self.transport
        running = self.running
        if running is not None and running is self.parsing and running.more_body:
            if running.started:
                self.close()  # its answer is being written: cut it, nothing can follow
                return
            # Its body was malformed: stop its work (an upstream exchange is cut, never
            # completed with a partial body) and answer for it.
            running.lost()
            running = None
        if running is not None:
            # Malformed bytes after whole requests: those are answered first, in order.
            # A pipelined request whose own bytes were malformed never runs.
            if self.parsing is not None and self.parsing in self.pipeline_queue:
                self.pipeline_queue.remove(self.parsing)
            self._refusal = error_bytes(status, message, close=True)
            return
        if transport is None:
            return
        self.write(error_bytes(status, message, close=True))
        if transport.can_write_eof() and not transport.is_closing():
            # Half-close and drop what the client still sends for a moment: closing at once
            # with unread bytes would reset the connection and could lose the answer.
            transport.write_eof()
            self.loop.call_later(1.0, self.close)
        else:
            self.close()


def _unread_bytes_wait(transport: asyncio.Transport) -> bool:
    """Whether the client's socket holds bytes (or its EOF) not read yet."""
    sock = transport.get_extra_info("socket")
    if sock is None or transport.is_closing():
        return False
    # poll, not select: select cannot watch descriptors above FD_SETSIZE (1024).
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLIN)
    return bool(poller.poll(0))
