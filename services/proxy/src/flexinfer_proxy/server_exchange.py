"""One request/response exchange of the proxy's HTTP/1.1 server, seen by the app as ASGI.

Leaner than uvicorn's cycle on the hot path: ``receive`` returns a body that already
arrived without suspending, ``send`` holds the response head until the first body bytes
so that head and body leave in one ``transport.write``, and a client disconnect can cancel
the request through a callback (the ``flexinfer.watch_disconnect`` scope extension)
instead of a watcher task.
"""

from __future__ import annotations

import asyncio
import http
import json
import logging
from collections.abc import Callable, MutableMapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from flexinfer_proxy.server import HttpProtocol

log = logging.getLogger(__name__)

WATCH_DISCONNECT = "flexinfer.watch_disconnect"
"""Scope extension: ``watch(callback)`` calls ``callback()`` when the client goes away."""
WatchDisconnect = Callable[[Callable[[], None] | None], None]


def _status_line(status: int) -> bytes:
    try:
        phrase = http.HTTPStatus(status).phrase.encode()
    except ValueError:
        phrase = b""
    return b"HTTP/1.1 %d %s\r\n" % (status, phrase)


STATUS_LINES = {status: _status_line(status) for status in range(100, 600)}


def error_bytes(status: int, message: str, *, close: bool, extra: bytes = b"") -> bytes:
    """A whole OpenAI-shaped error answer, for errors the server answers itself."""
    kind = "invalid_request_error" if status < 500 else "server_error"
    body = json.dumps(
        {"error": {"message": message, "type": kind, "param": None, "code": None}}
    ).encode()
    return b"%scontent-type: application/json\r\ncontent-length: %d\r\n%s%s\r\n%s" % (
        STATUS_LINES[status],
        len(body),
        extra,
        b"connection: close\r\n" if close else b"",
        body,
    )


class Exchange:
    """The ASGI ``receive``/``send`` pair of one request on a connection."""

    __slots__ = (
        "_body",
        "_body_delivered",
        "_expected",
        "_head",
        "_on_disconnect",
        "_waiter",
        "chunked",
        "conn",
        "continue_100",
        "disconnected",
        "keep_alive",
        "more_body",
        "response_complete",
        "response_started",
        "scope",
    )

    def __init__(
        self, conn: HttpProtocol, scope: dict[str, Any], keep_alive: bool, continue_100: bool
    ) -> None:
        self.conn = conn
        self.scope = scope
        self.keep_alive = keep_alive
        self.continue_100 = continue_100
        self.disconnected = False
        self.more_body = True
        self.response_started = False
        self.response_complete = False
        self.chunked = False
        self._body: list[bytes] = []
        self._body_delivered = False
        self._expected = -1
        self._head: list[bytes] | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._on_disconnect: Callable[[], None] | None = None

    # Fed by the connection.
    def feed(self, data: bytes) -> None:
        """Request body bytes arrived."""
        self._body.append(data)
        self._wake()

    def finish_body(self) -> None:
        """The request body is complete."""
        self.more_body = False
        self._wake()

    def lost(self) -> None:
        """The client went away: wake a waiting ``receive`` and run the disconnect watch."""
        self.disconnected = True
        self._wake()
        callback, self._on_disconnect = self._on_disconnect, None
        if callback is not None and not self.response_complete:
            callback()

    def buffered(self) -> int:
        """Body bytes received and not yet taken by the app."""
        return sum(map(len, self._body))

    def whole_body(self) -> bytes | None:
        """The request body if all of it arrived and none was taken, else None."""
        if self.more_body or self._body_delivered or self.continue_100:
            return None
        chunks = self._body
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def take_body(self) -> None:
        """The app took the whole body (``whole_body``): ``receive`` will not return it."""
        self._body.clear()
        self._body_delivered = True

    def respond(self, status: int, headers: Any, body: bytes) -> None:
        """Write a whole response now, without the ASGI ``send`` (the fast path)."""
        if self.disconnected:
            return
        self._start(status, headers)
        self._body_out(body, False)

    def watch_disconnect(self, callback: Callable[[], None] | None) -> None:
        """Call ``callback`` (soon) when the client disconnects; ``None`` stops watching."""
        if callback is not None and self.disconnected:
            self.conn.loop.call_soon(callback)
            return
        self._on_disconnect = callback

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # ASGI
    async def receive(self) -> dict[str, Any]:
        """The next body message, or ``http.disconnect`` once the client left or was answered."""
        if self.continue_100:
            self.continue_100 = False
            self.conn.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        while not (self.disconnected or self.response_complete):
            if self._body or (not self.more_body and not self._body_delivered):
                break
            self.conn.resume_reading()
            waiter = self._waiter = self.conn.loop.create_future()
            try:
                await waiter
            finally:
                self._waiter = None
        if self.disconnected or self.response_complete:
            return {"type": "http.disconnect"}
        chunks = self._body
        body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        chunks.clear()
        if not self.more_body:
            self._body_delivered = True
        self.conn.resume_reading()
        return {"type": "http.request", "body": body, "more_body": self.more_body}

    async def send(self, message: MutableMapping[str, Any]) -> None:
        """Write the response: the head waits for the first body bytes (one write)."""
        conn = self.conn
        if conn.write_paused and not self.disconnected:
            await conn.drain()
        if self.disconnected:
            return
        kind = message["type"]
        if not self.response_started:
            if kind != "http.response.start":
                raise RuntimeError(f"expected 'http.response.start', got {kind!r}")
            self._start(message["status"], message.get("headers", ()))
        elif self.response_complete:
            raise RuntimeError(f"unexpected {kind!r} after the response completed")
        elif kind != "http.response.body":
            raise RuntimeError(f"expected 'http.response.body', got {kind!r}")
        else:
            self._body_out(message.get("body", b""), message.get("more_body", False))

    def _start(self, status: int, headers: Any) -> None:
        self.response_started = True
        self.continue_100 = False
        head = [STATUS_LINES[status], self.conn.default_header_bytes()]
        close = False
        for name, value in headers:
            if b"\n" in value or b"\r" in value or b"\n" in name or b"\r" in name:
                raise RuntimeError("invalid HTTP header")
            lower = name.lower()
            if lower == b"content-length":
                self._expected = int(value)
            elif lower == b"transfer-encoding":
                continue  # the server frames the body itself
            elif lower == b"connection" and b"close" in value.lower():
                close = True
            head += (lower, b": ", value, b"\r\n")
        if close:
            self.keep_alive = False
        elif not self.keep_alive:
            head.append(b"connection: close\r\n")
        self._head = head
        if self._expected < 0:
            # A stream: its first event may be late, so the head goes out on the next loop
            # turn unless body bytes come first. With a length the body follows at once.
            self.conn.loop.call_soon(self._flush_head)

    def _flush_head(self) -> None:
        if self._head is not None and not self.disconnected:
            self.conn.write(self._head_bytes(more_body=True, size=0))

    def _head_bytes(self, *, more_body: bool, size: int) -> bytes:
        head = self._head
        assert head is not None
        self._head = None
        bodiless = self.scope["method"] == "HEAD" or self._status_bodiless(head[0])
        if self._expected < 0 and not bodiless:
            if more_body:
                self.chunked = True
                head.append(b"transfer-encoding: chunked\r\n")
            else:
                self._expected = size
                head.append(b"content-length: %d\r\n" % size)
        head.append(b"\r\n")
        return b"".join(head)

    @staticmethod
    def _status_bodiless(status_line: bytes) -> bool:
        return status_line[9:12] in (b"204", b"304") or status_line[9:10] == b"1"

    def _body_out(self, body: bytes, more_body: bool) -> None:
        out = self._head_bytes(more_body=more_body, size=len(body)) if self._head else b""
        if self.scope["method"] == "HEAD":
            body = b""
        elif self.chunked:
            if body:
                body = b"%x\r\n%s\r\n" % (len(body), body)
            if not more_body:
                body += b"0\r\n\r\n"
        elif self._expected >= 0:
            self._expected -= len(body)
            if self._expected < 0 or (not more_body and self._expected > 0):
                self.conn.close()
                raise RuntimeError("response body length differs from its Content-Length")
        if out or body:
            self.conn.write(out + body if out else body)
        if not more_body:
            self.response_complete = True
            self._on_disconnect = None
            self._body.clear()
            self._wake()
            self.conn.response_complete(self)
