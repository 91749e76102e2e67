"""A small HTTP/1.1 client for the hot path: pooled keep-alive connections, httptools parsing.

httpx spent most of the proxy's CPU per request (pool bookkeeping, a readability probe of
every idle connection, anyio layers). This client is an asyncio Protocol per connection:
the response head and body are parsed by httptools in ``data_received`` callbacks, and a
small answer is complete before the caller even awaits it. Bodies stream both ways with
flow control (a slow client pauses reading from the engine).
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import AsyncIterable
from typing import Any, cast
from urllib.parse import urlsplit

import httptools

from flexinfer_proxy.upstream_response import (
    ReadDeadline,
    ResponseListener,
    UpstreamReadError,
    UpstreamResponse,
)

__all__ = [
    "ConnectFailedError",
    "RequestFailedError",
    "UpstreamConnection",
    "UpstreamPool",
    "UpstreamReadError",
    "UpstreamResponse",
]

_KEEPALIVE_S = 30.0


class ConnectFailedError(Exception):
    """No connection could be made: nothing was sent."""


class RequestFailedError(Exception):
    """The request failed before the answer's head arrived (it may have been processed)."""


class UpstreamConnection(asyncio.Protocol):
    """One keep-alive connection to an engine; parses answers with httptools."""

    def __init__(self, pool: _HostPool) -> None:
        self.pool = pool
        self.loop = asyncio.get_running_loop()
        self.deadline = ReadDeadline(self.loop, pool.owner.read_timeout)
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.response: UpstreamResponse | None = None
        self.head: asyncio.Future[None] | None = None
        self.received = False
        self.closed = False
        self.reading_paused = False
        self.idle_since = 0.0
        self.counted = True
        """Still counted in the pool's open connections (until closed)."""
        self._eof_body = False
        self._drain: asyncio.Future[None] | None = None

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not subclass asyncio.Transport, hence a cast, not a check.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        if self.response is None:
            self.close()  # bytes nobody asked for: the connection is unusable
            return
        self.received = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(RequestFailedError(f"invalid HTTP answer: {exc}"))
            self.close()

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.deadline.cancel()
        self.pool.discard(self)
        response = self.response
        if response is not None and self._eof_body and response.status_code:
            response._finish()  # the head arrived; its body is delimited by the connection's end
        else:
            self._fail(exc or ConnectionResetError("the upstream closed the connection"))
        drain = self._drain
        if drain is not None and not drain.done():
            drain.set_exception(ConnectionResetError("the upstream closed the connection"))

    def pause_writing(self) -> None:
        self._drain = self.loop.create_future()

    def resume_writing(self) -> None:
        drain, self._drain = self._drain, None
        if drain is not None and not drain.done():
            drain.set_result(None)

    # httptools callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        response = self.response
        if response is not None:
            response.headers.append((name, value))
            lower = name.lower()
            if lower == b"content-length":
                response.content_length = value
            elif lower == b"content-type":
                response.content_type = value
            elif lower == b"transfer-encoding":
                response.chunked = True

    def on_headers_complete(self) -> None:
        response = self.response
        if response is None:
            return
        response.status_code = self.parser.get_status_code()
        response.keep_alive = self.parser.should_keep_alive()
        self._eof_body = response.content_length is None and not response.chunked
        head = self.head
        if head is not None and not head.done():
            head.set_result(None)
        elif response.listener is not None:
            response.listener.upstream_head(response)

    def on_body(self, body: bytes) -> None:
        if self.response is not None:
            self.response._feed(body)

    def on_message_complete(self) -> None:
        if self.response is not None:
            self.response._finish()

    # used by the pool and the response
    async def drain(self) -> None:
        """Wait while the transport's write buffer is full."""
        if self._drain is not None:
            await self._drain

    def pause_reading(self) -> None:
        if self.transport is not None and not self.reading_paused:
            self.reading_paused = True
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self.transport is not None and self.reading_paused:
            self.reading_paused = False
            self.transport.resume_reading()

    def begin(self, url: str) -> UpstreamResponse:
        """The answer to the request about to be sent on this connection."""
        response = self.response = UpstreamResponse(self, url)
        self.received = False
        return response

    def release(self) -> None:
        self.resume_reading()
        self.pool.put(self)

    def close(self) -> None:
        self.closed = True
        self.pool.discard(self)
        if self.transport is not None:
            self.transport.close()

    def _fail(self, exc: BaseException) -> None:
        head = self.head
        if head is not None and not head.done():
            head.set_exception(exc)
        elif self.response is not None:
            self.response._finish(exc)


class _HostPool:
    """Idle connections to one host:port, most recently used first."""

    def __init__(self, owner: UpstreamPool, host: str, port: int, tls: bool, path: str) -> None:
        self.owner = owner
        self.path_prefix = path.rstrip("/").encode()
        self.host = host
        self.port = port
        self.tls = tls
        self.idle: list[UpstreamConnection] = []
        self.host_header = host.encode("idna") + (b"" if port in (80, 443) else b":%d" % port)

    def request_head(
        self,
        method: bytes,
        target: bytes,
        headers: list[tuple[bytes, bytes]],
        body: bytes | AsyncIterable[bytes],
        length: int | None,
    ) -> bytes:
        """The request line and headers for this host (an external URL's path prefixed)."""
        if self.path_prefix:
            target = self.path_prefix + target
        return _request_head(method, target, self.host_header, headers, body, length)

    def take(self) -> UpstreamConnection | None:
        now = time.monotonic()
        while self.idle:
            conn = self.idle.pop()
            if not conn.closed and now - conn.idle_since < _KEEPALIVE_S:
                return conn
            conn.close()
        return None

    def put(self, conn: UpstreamConnection) -> None:
        if conn.closed or len(self.idle) >= self.owner.max_idle:
            conn.close()
            return
        conn.idle_since = time.monotonic()
        self.idle.append(conn)

    def discard(self, conn: UpstreamConnection) -> None:
        if conn in self.idle:
            self.idle.remove(conn)
        if conn.counted:
            conn.counted = False
            self.owner.open_connections -= 1

    async def connect(self) -> UpstreamConnection:
        owner = self.owner
        if owner.open_connections >= owner.max_connections:
            raise ConnectFailedError(f"{owner.max_connections} upstream connections are open")
        loop = asyncio.get_running_loop()
        ssl_context = owner.ssl_context() if self.tls else None
        owner.open_connections += 1
        try:
            async with asyncio.timeout(owner.connect_timeout):
                _, conn = await loop.create_connection(
                    lambda: UpstreamConnection(self),
                    self.host,
                    self.port,
                    ssl=ssl_context,
                    server_hostname=self.host if self.tls else None,
                )
        except (OSError, TimeoutError, ssl.SSLError) as exc:
            owner.open_connections -= 1
            raise ConnectFailedError(f"cannot connect to {self.host}:{self.port}: {exc!r}") from exc
        return conn


class UpstreamPool:
    """Keep-alive connections per engine; ``request`` sends one request and returns its head."""

    def __init__(
        self,
        *,
        connect_timeout: float,
        read_timeout: float,
        max_connections: int,
        max_idle: int,
    ) -> None:
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self.max_connections = max_connections
        self.max_idle = max_idle
        self.open_connections = 0
        self._hosts: dict[str, _HostPool] = {}
        self._ssl: ssl.SSLContext | None = None

    async def __aenter__(self) -> UpstreamPool:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def ssl_context(self) -> ssl.SSLContext:
        """The default TLS context, made once."""
        if self._ssl is None:
            self._ssl = ssl.create_default_context()
        return self._ssl

    async def aclose(self) -> None:
        """Close every idle connection."""
        for host in self._hosts.values():
            for conn in list(host.idle):
                conn.close()

    def _host(self, base_url: str) -> _HostPool:
        host = self._hosts.get(base_url)
        if host is None:
            parts = urlsplit(base_url)
            tls = parts.scheme == "https"
            port = parts.port or (443 if tls else 80)
            host = _HostPool(self, parts.hostname or "localhost", port, tls, parts.path)
            self._hosts[base_url] = host
        return host

    async def request(
        self,
        base_url: str,
        method: bytes,
        target: bytes,
        headers: list[tuple[bytes, bytes]],
        body: bytes | AsyncIterable[bytes],
        length: int | None = None,
    ) -> UpstreamResponse:
        """Send ``method target`` to ``base_url``; the answer with its head read.

        ConnectFailedError when nothing was sent; RequestFailedError when the request
        failed before the head came back.
        """
        pool = self._host(base_url)
        head = pool.request_head(method, target, headers, body, length)
        conn = pool.take()
        if conn is not None and isinstance(body, bytes):
            try:
                return await self._exchange(conn, head, body, base_url)
            except RequestFailedError as exc:
                if conn.received or isinstance(exc.__cause__, TimeoutError):
                    raise  # the engine may have run it: never resend
                # A kept-alive connection the engine had closed: resend on a fresh one.
            conn = None
        if conn is None:
            conn = await pool.connect()
        return await self._exchange(conn, head, body, base_url)

    def take_idle(self, base_url: str) -> UpstreamConnection | None:
        """A kept-alive connection to ``base_url`` if one is idle (for ``send_now``)."""
        return self._host(base_url).take()

    def send_now(
        self,
        conn: UpstreamConnection,
        base_url: str,
        method: bytes,
        target: bytes,
        headers: list[tuple[bytes, bytes]],
        body: bytes,
        listener: ResponseListener,
    ) -> UpstreamResponse:
        """Send a whole request on ``conn`` (from ``take_idle``) without waiting.

        The answer is reported to ``listener`` from the connection's callbacks; the read
        timeout fails ``listener`` (an ``Expirable`` too) through ``conn.deadline``.
        """
        response = conn.begin(base_url)
        response.listener = listener
        transport = conn.transport
        assert transport is not None, "take_idle gives open connections"
        transport.write(conn.pool.request_head(method, target, headers, body, None) + body)
        return response

    async def _exchange(
        self, conn: UpstreamConnection, head: bytes, body: bytes | AsyncIterable[bytes], url: str
    ) -> UpstreamResponse:
        response = conn.begin(url)
        waiter = conn.head = conn.loop.create_future()
        transport = conn.transport
        if transport is None or conn.closed:
            conn.close()
            raise RequestFailedError("the upstream connection is closed")
        try:
            if isinstance(body, bytes):
                transport.write(head + body if len(body) < 65536 else head)
                if len(body) >= 65536:
                    transport.write(body)
            else:
                await _send_stream(conn, transport, head, body)
            conn.deadline.watch(waiter)
            try:
                await waiter
            finally:
                conn.deadline.clear()
        except (OSError, TimeoutError, RequestFailedError) as exc:
            conn.response = None
            conn.close()
            if isinstance(exc, RequestFailedError):
                raise
            raise RequestFailedError(f"upstream {url} failed: {exc!r}") from exc
        except BaseException:
            conn.response = None
            conn.close()
            raise
        finally:
            conn.head = None
        return response


async def _send_stream(
    conn: UpstreamConnection, transport: asyncio.Transport, head: bytes, body: AsyncIterable[bytes]
) -> None:
    chunked = b"transfer-encoding: chunked\r\n" in head
    transport.write(head)
    async for chunk in body:
        if not chunk:
            continue
        transport.write(b"%x\r\n%s\r\n" % (len(chunk), chunk) if chunked else chunk)
        await conn.drain()
        if conn.closed:
            raise RequestFailedError("the upstream closed the connection while receiving")
    if chunked:
        transport.write(b"0\r\n\r\n")


def _request_head(
    method: bytes,
    target: bytes,
    host: bytes,
    headers: list[tuple[bytes, bytes]],
    body: bytes | AsyncIterable[bytes],
    length: int | None,
) -> bytes:
    parts: list[Any] = [method, b" ", target, b" HTTP/1.1\r\nhost: ", host, b"\r\n"]
    for name, value in headers:
        parts += (name, b": ", value, b"\r\n")
    if isinstance(body, bytes):
        parts.append(b"content-length: %d\r\n\r\n" % len(body))
    elif length is not None:
        parts.append(b"content-length: %d\r\n\r\n" % length)
    else:
        parts.append(b"transfer-encoding: chunked\r\n\r\n")
    return b"".join(parts)
