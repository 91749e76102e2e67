"""One request/response exchange on a connection of the proxy's own HTTP/1.1 server.

Proxied requests see it as a ``Downstream``: the body that already arrived is taken with
no suspension, a whole answer leaves in one ``transport.write``, and a client disconnect
reaches the request through a callback instead of a watcher task. Every other route
(health, metrics, /v1/models) sees it as ASGI ``receive``/``send``.
"""

from __future__ import annotations

import asyncio
import http
import json
from collections.abc import MutableMapping
from typing import Any, Protocol

from flexinfer_common.http1.body_stream import ClientGoneError
from flexinfer_common.http1.downstream import Downstream, Headers


def _status_line(status: int) -> bytes:
    try:
        phrase = http.HTTPStatus(status).phrase.encode()
    except ValueError:
        phrase = b""
    return b"HTTP/1.1 %d %s\r\n" % (status, phrase)


STATUS_LINES = {status: _status_line(status) for status in range(100, 600)}


def error_bytes(status: int, message: str, *, close: bool) -> bytes:
    """A whole OpenAI-shaped error answer, for errors the server answers itself."""
    kind = "invalid_request_error" if status < 500 else "server_error"
    body = json.dumps(
        {"error": {"message": message, "type": kind, "param": None, "code": None}}
    ).encode()
    return b"%scontent-type: application/json\r\ncontent-length: %d\r\n%s\r\n%s" % (
        STATUS_LINES[status],
        len(body),
        b"connection: close\r\n" if close else b"",
        body,
    )


class ClientConnection(Protocol):
    """What an exchange needs of its connection (``HttpProtocol``)."""

    loop: asyncio.AbstractEventLoop
    write_paused: bool

    def write(self, data: bytes) -> None:
        """Write unless closing."""

    async def drain(self) -> None:
        """Wait until the client reads what was written."""

    def resume_reading(self) -> None:
        """Read from the client again (the body buffer has room)."""

    def close(self) -> None:
        """Close the connection."""

    def default_header_bytes(self) -> bytes:
        """The date and server headers."""

    def response_complete(self, exchange: Exchange) -> None:
        """The answer is written."""


class Exchange(Downstream):
    """The request body in, the answer out, for one request on a connection."""

    headers_checked = True  # llhttp refuses control characters in names and values

    __slots__ = (
        "_body",
        "_body_delivered",
        "_buffered",
        "_expected",
        "_head",
        "_waiter",
        "chunked",
        "conn",
        "continue_100",
        "disconnected",
        "gone",
        "headers",
        "keep_alive",
        "known",
        "method",
        "more_body",
        "response_complete",
        "scope",
        "started",
        "target",
        "task",
    )

    def __init__(
        self,
        conn: ClientConnection,
        method: str,
        target: bytes,
        headers: Headers,
        known: dict[bytes, bytes],
        keep_alive: bool,
        continue_100: bool,
    ) -> None:
        self.conn = conn
        self.method = method
        self.target = target
        self.headers = headers
        self.known = known
        """The first value of each header, by lowercase name, noted while parsing."""
        self.keep_alive = keep_alive
        self.continue_100 = continue_100
        self.scope: dict[str, Any] | None = None
        """The ASGI scope, for requests the app serves."""
        self.disconnected = False
        self.gone = False
        self.task: asyncio.Task[None] | None = None
        """The task serving this request: cancelled if the client leaves first."""
        self.more_body = True
        self.started = False
        self.response_complete = False
        self.chunked = False
        self._body: list[bytes] = []
        self._buffered = 0
        self._body_delivered = False
        self._expected = -1
        self._head: list[bytes] | None = None
        self._waiter: asyncio.Future[None] | None = None

    def header(self, name: bytes) -> bytes | None:
        """The first value of request header ``name`` (lowercase), if any."""
        return self.known.get(name)

    # Fed by the connection.
    def feed(self, data: bytes) -> None:
        """Request body bytes arrived."""
        self._body.append(data)
        self._buffered += len(data)
        self._wake()

    def finish_body(self) -> None:
        """The request body is complete."""
        self.more_body = False
        self._wake()

    def lost(self) -> None:
        """The client went away: wake a waiting ``receive``, stop the serving task."""
        self.disconnected = True
        self._wake()
        task = self.task
        if task is not None and not self.response_complete and not self.gone:
            self.gone = True
            task.cancel()

    def buffered(self) -> int:
        """Body bytes received and not yet taken."""
        return self._buffered

    # Downstream
    def body_now(self) -> bytes | None:
        """The request body if all of it arrived and none was taken, else None."""
        if self.more_body or self._body_delivered or self.continue_100:
            return None
        chunks = self._body
        body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        chunks.clear()
        self._buffered = 0
        self._body_delivered = True
        return body

    async def receive(self) -> tuple[bytes, bool]:
        """The next body bytes; ClientGoneError once the client left (after the whole
        body was taken, it waits for that, as ASGI's ``receive`` does)."""
        if self.continue_100:
            self.continue_100 = False
            self.conn.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        while not (self._body or (not self.more_body and not self._body_delivered)):
            if self.disconnected or self.response_complete:
                raise ClientGoneError
            self.conn.resume_reading()
            waiter = self._waiter = self.conn.loop.create_future()
            try:
                await waiter
            finally:
                self._waiter = None
        if self.disconnected:
            raise ClientGoneError
        chunks = self._body
        body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        chunks.clear()
        self._buffered = 0
        if not self.more_body:
            self._body_delivered = True
        self.conn.resume_reading()
        return body, self.more_body

    async def respond(self, status: int, headers: Headers, body: bytes) -> None:
        """Write a whole answer now, in one write."""
        if self.disconnected:
            raise ClientGoneError
        self._start(status, headers, length=len(body), checked=True)
        self._body_out(body, False)

    async def start(self, status: int, headers: Headers) -> None:
        """Begin a chunked answer; the head goes out with the first bytes (or next turn)."""
        if self.disconnected:
            raise ClientGoneError
        self._start(status, headers, length=-1, checked=True)

    async def send(self, chunk: bytes) -> None:
        """More of the answer, after the client has read what came before."""
        if self.conn.write_paused and not self.disconnected:
            await self.conn.drain()
        if self.disconnected:
            raise ClientGoneError
        if chunk:
            self._body_out(chunk, True)

    async def end(self) -> None:
        """The answer is complete."""
        if self.disconnected:
            raise ClientGoneError
        self._body_out(b"", False)

    def abort(self) -> None:
        """Cut the connection: a broken answer must not look complete."""
        self.keep_alive = False
        self.conn.close()

    # ASGI, for the app's routes.
    async def asgi_receive(self) -> dict[str, Any]:
        """The next body message, or ``http.disconnect``."""
        try:
            body, more = await self.receive()
        except ClientGoneError:
            return {"type": "http.disconnect"}
        return {"type": "http.request", "body": body, "more_body": more}

    async def asgi_send(self, message: MutableMapping[str, Any]) -> None:
        """One ASGI response message."""
        kind = message["type"]
        if not self.started:
            if kind != "http.response.start":
                raise RuntimeError(f"expected 'http.response.start', got {kind!r}")
            self._start(message["status"], message.get("headers", ()), length=-1, checked=False)
        elif self.response_complete:
            raise RuntimeError(f"unexpected {kind!r} after the response completed")
        elif kind != "http.response.body":
            raise RuntimeError(f"expected 'http.response.body', got {kind!r}")
        else:
            if self.conn.write_paused and not self.disconnected:
                await self.conn.drain()
            if not self.disconnected:
                self._body_out(message.get("body", b""), message.get("more_body", False))

    # Framing.
    def _start(self, status: int, headers: Any, *, length: int, checked: bool) -> None:
        """``checked``: the headers come from a parser (an engine's answer) or from us,
        with lowercase names and no line break; an app's headers are checked here."""
        self.started = True
        self.continue_100 = False
        head = [STATUS_LINES[status], self.conn.default_header_bytes()]
        close = False
        self._expected = length
        for name, value in headers:
            if checked:
                lower = name
            elif b"\n" in value or b"\r" in value or b"\n" in name or b"\r" in name:
                raise RuntimeError("invalid HTTP header")
            else:
                lower = name.lower()
            if lower in (b"content-length", b"transfer-encoding"):
                if lower == b"content-length" and length < 0:
                    self._expected = int(value)  # an app's own framing (FastAPI routes)
                continue
            if lower == b"connection" and b"close" in value.lower():
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
        bodiless = self.method == "HEAD" or _bodiless(head[0])
        if not bodiless:
            if self._expected >= 0:
                head.append(b"content-length: %d\r\n" % self._expected)
            elif more_body:
                self.chunked = True
                head.append(b"transfer-encoding: chunked\r\n")
            else:
                self._expected = size
                head.append(b"content-length: %d\r\n" % size)
        head.append(b"\r\n")
        return b"".join(head)

    def _body_out(self, body: bytes, more_body: bool) -> None:
        out = self._head_bytes(more_body=more_body, size=len(body)) if self._head else b""
        if self.method == "HEAD":
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
            self._body.clear()
            self._buffered = 0
            self._wake()
            self.conn.response_complete(self)

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


def _bodiless(status_line: bytes) -> bool:
    return status_line[9:12] in (b"204", b"304") or status_line[9:10] == b"1"
