"""The proxy's HTTP/1.1 server: one asyncio Protocol per client connection, httptools parsing.

uvicorn's per-request objects (its cycle, scope handling, events, header regexes) were
about a quarter of the proxy's CPU. This protocol plugs into uvicorn as its ``http``
class, so uvicorn still owns the socket, lifespan, signals and graceful shutdown, while
each request costs one lean ``Exchange`` and one task. Every route (proxied, health,
metrics, admin) is served by the same ASGI app on the same port.

Keep-alive and pipelining (a request parsed while another runs waits in order, with
reading paused), chunked and Content-Length bodies, ``Expect: 100-continue``, flow control
both ways, and a client disconnect that reaches the running request.
"""

from __future__ import annotations

import asyncio
import logging
import urllib.parse
from collections import deque
from collections.abc import Coroutine
from typing import Any, cast

import httptools
from uvicorn.config import Config
from uvicorn.server import ServerState

from flexinfer_proxy.server_exchange import WATCH_DISCONNECT, Exchange, error_bytes

log = logging.getLogger(__name__)

_HIGH_WATER = 64 * 1024
"""Request body bytes buffered for the app beyond which reading from the client pauses."""
_ASGI = {"version": "3.0", "spec_version": "2.3"}
_MAX_HEAD = 64 * 1024
"""Request line + headers beyond this are refused (431): httptools itself sets no limit."""


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
        # The proxied routes go straight to the proxy handler, past uvicorn's proxy-headers
        # middleware (the handler never reads the client address) and ProxyApp's dispatch.
        self.fast: Any = getattr(config.app, "proxy", None)
        self.loop = _loop or asyncio.get_event_loop()
        self.server_state = server_state
        self.app_state = app_state
        self.root_path = config.root_path
        self.keepalive_s = float(config.timeout_keep_alive)
        self.limit_concurrency = config.limit_concurrency
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.server: tuple[str, int] | None = None
        self.client: tuple[str, int] | None = None
        self.scheme = "http"
        self.running: Exchange | None = None
        """The exchange the app is serving now."""
        self.parsing: Exchange | None = None
        """The exchange whose request is being parsed (the running one, or a pipelined one)."""
        self.pipeline: deque[Exchange] = deque()
        self.write_paused = False
        self.reading_paused = False
        self._drain: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._idle_since: float | None = None
        self._url = b""
        self._headers: list[tuple[bytes, bytes]] = []
        self._continue = False
        self._defaults: tuple[object, bytes] = (None, b"")
        self._head_size = 0
        self._discard = False
        self._deferred: Exchange | None = None
        """A proxied request whose body is still arriving in this ``data_received``."""
        self._feeding = False

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Register the connection; an idle client is dropped after the keep-alive timeout."""
        # uvloop's transports do not subclass asyncio.Transport, hence a cast.
        self.transport = cast(asyncio.Transport, transport)
        self.server_state.connections.add(self)  # type: ignore[arg-type]
        self.server = _addr(transport.get_extra_info("sockname"))
        self.client = _addr(transport.get_extra_info("peername"))
        if transport.get_extra_info("sslcontext"):
            self.scheme = "https"
        self._arm_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        """Tell the running request (and queued ones) that the client is gone."""
        self.server_state.connections.discard(self)
        self._cancel_timer()
        if self._timer is not None:
            self._timer.cancel()
        for exchange in (self.running, *self.pipeline):
            if exchange is not None:
                exchange.lost()
        if self.parsing is not None and self.parsing is not self.running:
            self.parsing.lost()
        self.pipeline.clear()
        self.write_paused = False
        drain, self._drain = self._drain, None
        if drain is not None and not drain.done():
            drain.set_result(None)

    def eof_received(self) -> bool | None:
        """A half-closed client: the transport closes itself (as under uvicorn)."""
        return None

    def data_received(self, data: bytes) -> None:
        """Feed the parser; malformed HTTP gets a 400 and the connection closes."""
        if self._discard:
            return
        self._feeding = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            pass  # no upgrades (websockets) here: the request is served as plain HTTP
        except httptools.HttpParserError as exc:
            # httptools wraps what a callback raised; the original is the context.
            cause = exc.__context__
            if isinstance(cause, _RejectedError):
                self._reject(cause.status, str(cause))
            else:
                self._reject(400, f"invalid HTTP request: {exc}")
        finally:
            self._feeding = False
        deferred, self._deferred = self._deferred, None
        if deferred is not None and not self._discard:
            self._spawn(self.fast, deferred)  # its body did not arrive whole: the app reads it

    def pause_writing(self) -> None:
        """The client reads slower than we write: ``send`` waits in ``drain``."""
        self.write_paused = True

    def resume_writing(self) -> None:
        """The client caught up."""
        self.write_paused = False
        drain, self._drain = self._drain, None
        if drain is not None and not drain.done():
            drain.set_result(None)

    # httptools callbacks
    def on_message_begin(self) -> None:
        """A new request starts: reset the head accumulators."""
        self._url = b""
        self._headers = []
        self._continue = False
        self._head_size = 0

    def on_url(self, url: bytes) -> None:
        """Part of the request target."""
        self._url += url
        self._grow(len(url))

    def on_header(self, name: bytes, value: bytes) -> None:
        """One request header (names lowercased, as ASGI wants)."""
        self._head_size += len(name) + len(value) + 4
        if self._head_size > _MAX_HEAD:
            self._grow(0)
        name = name.lower()
        if name == b"expect" and value.lower() == b"100-continue":
            self._continue = True
        self._headers.append((name, value))

    def _grow(self, size: int) -> None:
        self._head_size += size
        if self._head_size > _MAX_HEAD:
            raise _RejectedError(431, f"the request head exceeds {_MAX_HEAD} bytes")

    def on_headers_complete(self) -> None:
        """The head is in: run the request now, or queue it behind the running one."""
        self._cancel_timer()
        parser = self.parser
        version = parser.get_http_version()
        exchange = Exchange(
            self,
            self._scope(parser.get_method().decode("ascii"), version),
            version != "1.0" and parser.should_keep_alive(),
            self._continue,
        )
        self.parsing = exchange
        if self.running is None:
            self._start(exchange)
        else:
            self.pipeline.append(exchange)
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
        if exchange is self._deferred:
            self._deferred = None
            self._serve_now(exchange)
        elif exchange.response_complete and exchange is not self.running:
            self._next(exchange)  # the dropped rest of an early-answered request is read

    def _scope(self, method: str, version: str) -> dict[str, Any]:
        try:
            url = httptools.parse_url(self._url)
            raw_path: bytes = url.path
            path = raw_path.decode("ascii")
        except (httptools.HttpParserInvalidURLError, UnicodeDecodeError) as exc:
            raise _RejectedError(400, "invalid request target") from exc
        if "%" in path:
            path = urllib.parse.unquote(path)
        return {
            "type": "http",
            "asgi": _ASGI,
            "http_version": version,
            "server": self.server,
            "client": self.client,
            "scheme": self.scheme,
            "method": method,
            "root_path": self.root_path,
            "path": self.root_path + path,
            "raw_path": self.root_path.encode("ascii") + raw_path,
            "query_string": url.query or b"",
            "headers": self._headers,
            "state": self.app_state.copy(),
            "extensions": {},
        }

    # Running requests.
    def _start(self, exchange: Exchange) -> None:
        self.running = exchange
        scope = exchange.scope
        limit = self.limit_concurrency
        if limit is not None and (
            len(self.server_state.connections) > limit or len(self.server_state.tasks) >= limit
        ):
            self.write(error_bytes(503, "the server is at its concurrency limit", close=True))
            self.close()
            return
        scope["extensions"][WATCH_DISCONNECT] = exchange.watch_disconnect
        if (
            self.fast is not None
            and scope["method"] == "POST"
            and scope["path"].startswith(("/v1/", "/model/"))
        ):
            if not exchange.more_body:
                self._serve_now(exchange)
            elif self._feeding:
                self._deferred = exchange  # decided once this data is parsed
            else:
                self._spawn(self.fast, exchange)
            return
        self._spawn(self.app, exchange)

    def _serve_now(self, exchange: Exchange) -> None:
        """Let the proxy answer from callbacks (``serve_now``), else run it as a task."""
        try:
            served = self.fast.serve_now(exchange)
        except Exception:  # a bug: it may have acted already, so nothing is retried
            log.exception("exception in the proxy's fast path")
            if not exchange.response_started and not exchange.disconnected:
                self.write(error_bytes(500, "internal server error", close=True))
            self.close()
            return
        if not served:
            self._spawn(self.fast, exchange)

    def _spawn(self, app: Any, exchange: Exchange) -> None:
        self.run_task(exchange, app(exchange.scope, exchange.receive, exchange.send))

    def run_task(self, exchange: Exchange, work: Coroutine[Any, Any, None]) -> None:
        """Serve ``exchange`` by running ``work`` (the app, or the proxy's continuation)."""
        task = self.loop.create_task(self._run(work, exchange))
        tasks = self.server_state.tasks
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    async def _run(self, work: Coroutine[Any, Any, None], exchange: Exchange) -> None:
        try:
            await work
        except BaseException as exc:  # the app's bug: answer 500 or cut the connection
            if not isinstance(exc, asyncio.CancelledError):
                log.error("exception in the ASGI app", exc_info=exc)
            if not exchange.response_started and not exchange.disconnected:
                self.write(error_bytes(500, "internal server error", close=True))
            self.close()
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            return
        if exchange.disconnected or exchange.response_complete:
            return
        log.error("the ASGI app returned without completing its response")
        if not exchange.response_started:
            self.write(error_bytes(500, "internal server error", close=True))
        self.close()

    def response_complete(self, exchange: Exchange) -> None:
        """The answer is written: go on with the next request, or close."""
        self.server_state.total_requests += 1
        self.running = None
        # The scope holds a method of the exchange: drop it, or each request is a cycle.
        exchange.scope["extensions"].pop(WATCH_DISCONNECT, None)
        if exchange.more_body:
            # Answered before the whole body arrived (413, 408, an early error). Closing
            # now could reset the connection and lose the answer, so the rest of the body
            # is read and dropped, for at most the keep-alive timeout.
            self._arm_timer()
            self.resume_reading()
            return
        self._next(exchange)

    def _next(self, done: Exchange) -> None:
        if not done.keep_alive:
            self.close()
            return
        if self.pipeline:
            self._start(self.pipeline.popleft())
        else:
            self._arm_timer()
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
        if not self.reading_paused or self.transport is None or self.pipeline:
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
    def _reject(self, status: int, message: str) -> None:
        log.debug("rejecting a request: %s", message)
        self._discard = True
        transport = self.transport
        if transport is None or (self.running is not None and not self.running.response_complete):
            self.close()  # an answer is being written: cut it, as nothing else can follow
            return
        self.write(error_bytes(status, message, close=True))
        if transport.can_write_eof() and not transport.is_closing():
            # Half-close and drop what the client still sends for a moment: closing at once
            # with unread bytes would reset the connection and could lose the answer.
            transport.write_eof()
            self.loop.call_later(1.0, self.close)
        else:
            self.close()

    def _arm_timer(self) -> None:
        """The connection is idle from now: close it unless a request head comes in time.

        Lazy: one timer per connection that re-checks when it fires, instead of a timer
        armed and cancelled on every request.
        """
        self._idle_since = self.loop.time()
        if self._timer is None:
            self._timer = self.loop.call_later(self.keepalive_s, self._check_idle)

    def _cancel_timer(self) -> None:
        self._idle_since = None

    def _check_idle(self) -> None:
        self._timer = None
        if self._idle_since is None:
            return  # busy: the next idle period arms it again
        left = self._idle_since + self.keepalive_s - self.loop.time()
        if left <= 0:
            self.close()
        else:
            self._timer = self.loop.call_later(left, self._check_idle)


class _RejectedError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _addr(value: Any) -> tuple[str, int] | None:
    if isinstance(value, tuple) and len(value) >= 2:
        return (str(value[0]), int(value[1]))
    return None
