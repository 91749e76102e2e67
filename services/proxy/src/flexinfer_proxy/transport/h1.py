"""The proxy's own HTTP/1.1 client: pooled keep-alive connections, httptools parsing.

httpx spent most of the proxy's CPU per request (pool bookkeeping, a readability probe of
every idle connection, anyio layers). Here each connection is an asyncio Protocol whose
parser callbacks fill the answer, so a small answer is complete before the request's
task even resumes. Bodies stream both ways with flow control (a slow client pauses
reading from the engine).
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import AsyncIterable
from typing import Any
from urllib.parse import urlsplit

from flexinfer_proxy.transport.base import (
    ConnectFailedError,
    RequestFailedError,
    UpstreamAnswer,
    UpstreamRequest,
    UpstreamTransport,
)
from flexinfer_proxy.transport.h1_connection import H1Connection
from flexinfer_proxy.transport.settings import TransportSettings

_INLINE_BODY = 64 * 1024
"""Bodies up to this size leave in one write with the head."""


class HostPool:
    """Idle connections to one base URL, most recently used first."""

    def __init__(self, owner: H1Transport, base_url: str) -> None:
        parts = urlsplit(base_url)
        self.owner = owner
        self.tls = parts.scheme == "https"
        self.host = parts.hostname or "localhost"
        self.port = parts.port or (443 if self.tls else 80)
        self.path_prefix = parts.path.rstrip("/").encode()
        host = self.host.encode("idna") + (b"" if parts.port is None else b":%d" % self.port)
        self._after_target = b" HTTP/1.1\r\nhost: " + host + b"\r\n"
        self.idle: list[H1Connection] = []

    def head(self, request: UpstreamRequest) -> bytes:
        """The request line and headers (an external URL's path prefixed to the target)."""
        parts: list[Any] = [
            request.method,
            b" ",
            self.path_prefix,
            request.target,
            self._after_target,
        ]
        for name, value in request.headers:
            parts += (name, b": ", value, b"\r\n")
        body = request.body
        if isinstance(body, bytes):
            parts.append(b"content-length: %d\r\n\r\n" % len(body))
        elif request.length is not None:
            parts.append(b"content-length: %d\r\n\r\n" % request.length)
        else:
            parts.append(b"transfer-encoding: chunked\r\n\r\n")
        return b"".join(parts)

    def take(self) -> H1Connection | None:
        """An idle connection that is still fresh, if any."""
        now = time.monotonic()
        while self.idle:
            conn = self.idle.pop()
            if not conn.closed and now - conn.idle_since < self.owner.settings.keepalive_s:
                return conn
            conn.close()
        return None

    def put(self, conn: H1Connection) -> None:
        """Keep ``conn`` for reuse (closed instead beyond the idle limit)."""
        if conn.closed or len(self.idle) >= self.owner.settings.max_idle:
            conn.close()
            return
        conn.idle_since = time.monotonic()
        self.idle.append(conn)
        self.owner.sweep_later()

    def close_stale(self, now: float) -> None:
        """Close idle connections older than the keep-alive period."""
        fresh = [c for c in self.idle if now - c.idle_since < self.owner.settings.keepalive_s]
        for conn in self.idle:
            if conn not in fresh:
                conn.close()
        self.idle[:] = fresh

    def discard(self, conn: H1Connection) -> None:
        """``conn`` closed: it is neither idle nor counted any more."""
        if conn in self.idle:
            self.idle.remove(conn)
        self.owner.forget(conn)

    async def connect(self) -> H1Connection:
        """A new connection, within the connect timeout."""
        owner = self.owner
        settings = owner.settings
        if len(owner.open) >= settings.max_connections and not owner.close_one_idle():
            raise ConnectFailedError(f"{settings.max_connections} upstream connections are busy")
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(settings.connect_timeout_s):
                _, conn = await loop.create_connection(
                    lambda: H1Connection(self, settings.read_timeout_s),
                    self.host,
                    self.port,
                    ssl=owner.ssl_context() if self.tls else None,
                    server_hostname=self.host if self.tls else None,
                )
        except (OSError, TimeoutError, ssl.SSLError) as exc:
            raise ConnectFailedError(f"cannot connect to {self.host}:{self.port}: {exc!r}") from exc
        owner.open.add(conn)
        return conn


class H1Transport(UpstreamTransport):
    """Keep-alive connections per engine base URL."""

    def __init__(self, settings: TransportSettings) -> None:
        self.settings = settings
        self.open: set[H1Connection] = set()
        self._hosts: dict[str, HostPool] = {}
        self._ssl: ssl.SSLContext | None = None
        self._sweep: asyncio.TimerHandle | None = None

    def ssl_context(self) -> ssl.SSLContext:
        """The default TLS context, made once."""
        if self._ssl is None:
            self._ssl = ssl.create_default_context()
        return self._ssl

    def forget(self, conn: H1Connection) -> None:
        """A connection closed."""
        self.open.discard(conn)

    def close_one_idle(self) -> bool:
        """Make room at the connection limit: close the longest-idle connection, if any.

        Connections idle towards engines that are gone or unused would otherwise hold the
        limit (an engine that keeps its end open never closes them)."""
        idle = [(c.idle_since, i, c, h) for h in self._hosts.values() for i, c in enumerate(h.idle)]
        if not idle:
            return False
        _, _, conn, host = min(idle, key=lambda entry: entry[:2])
        host.idle.remove(conn)
        conn.close()
        return True

    def sweep_later(self) -> None:
        """Close stale idle connections within a keep-alive period (one timer for all)."""
        if self._sweep is None:
            loop = asyncio.get_running_loop()
            self._sweep = loop.call_later(self.settings.keepalive_s, self._close_stale)

    def _close_stale(self) -> None:
        self._sweep = None
        now = time.monotonic()
        for host in list(self._hosts.values()):
            host.close_stale(now)
            if not host.idle and not any(c.pool is host for c in self.open):
                self._hosts = {u: h for u, h in self._hosts.items() if h is not host}
        if any(host.idle for host in self._hosts.values()):
            self.sweep_later()

    async def aclose(self) -> None:
        """Close every connection."""
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
        for conn in list(self.open):
            conn.close()

    async def request(self, base_url: str, request: UpstreamRequest) -> UpstreamAnswer:
        """Send ``request``; a kept-alive connection the engine had closed is retried fresh."""
        pool = self._hosts.get(base_url)
        if pool is None:
            pool = self._hosts[base_url] = HostPool(self, base_url)
        head = pool.head(request)
        conn = pool.take()
        if conn is not None and isinstance(request.body, bytes):
            try:
                return await _exchange(conn, head, request.body, base_url)
            except _TimedOutError:
                raise  # the engine may be running it: never resend
            except RequestFailedError:
                if conn.received:
                    raise  # the engine has run it: never resend
        elif conn is not None:
            pool.put(conn)  # a streamed body is sent once: only on a fresh connection
        return await _exchange(await pool.connect(), head, request.body, base_url)


async def _exchange(
    conn: H1Connection, head: bytes, body: bytes | AsyncIterable[bytes], url: str
) -> UpstreamAnswer:
    answer = conn.begin(url)
    waiter = conn.head = conn.loop.create_future()
    transport = conn.transport
    try:
        if transport is None or conn.closed:
            raise RequestFailedError("the upstream connection is closed")
        if isinstance(body, bytes):
            if len(body) <= _INLINE_BODY:
                transport.write(head + body)
            else:
                transport.write(head)
                transport.write(body)
            conn.request_written = True
        else:
            await _send_stream(conn, transport, head, body)
        conn.deadline.watch(waiter)
        try:
            await waiter
        finally:
            conn.deadline.clear()
    except TimeoutError as exc:
        conn.close()
        raise _TimedOutError(f"upstream {url} failed: {exc!r}") from exc
    except OSError as exc:
        conn.close()
        raise RequestFailedError(f"upstream {url} failed: {exc!r}") from exc
    except BaseException:
        conn.close()
        raise
    finally:
        conn.head = None
    return answer


class _TimedOutError(RequestFailedError):
    """No answer within the read timeout. A class of its own, not a ``__cause__`` to
    inspect: the compiled build (libs/common/hatch_build.py) does not keep an async
    function's ``raise ... from``."""


async def _send_stream(
    conn: H1Connection, transport: asyncio.Transport, head: bytes, body: AsyncIterable[bytes]
) -> None:
    chunked = head.endswith(b"transfer-encoding: chunked\r\n\r\n")
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
    conn.request_written = True
