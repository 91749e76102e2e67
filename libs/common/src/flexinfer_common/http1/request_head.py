"""Checks the server makes on request heads that httptools leaves out, on the raw bytes.

``RejectedError`` is how a check refuses a request: the server answers it with the status
and message, then closes the connection.
"""

from __future__ import annotations

import re
from typing import Any, Protocol

import httptools

MAX_HEAD = 64 * 1024
"""Request line + headers beyond this are refused (431): httptools itself sets no limit."""
_REQUEST_LINE = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+ [\x21-\x7e]+ HTTP/[0-9]\.[0-9]")
"""method SP request-target SP HTTP-version, one space each (RFC 9112 3)."""


class RejectedError(Exception):
    """A request refused before anything of it runs."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class RequestLineCheck:
    """Checks a request line that begins a read as strictly as RFC 9112 writes it.

    llhttp takes runs of spaces between its parts; h11 and most servers do not, and what
    one reads as one request another must not read otherwise. (A request line that follows
    another request within one read is llhttp's alone to check.)
    """

    __slots__ = ("_line", "between")

    def __init__(self) -> None:
        self._line: bytes | None = None
        """The start of a request line collected so far."""
        self.between = True
        """No request is being parsed: the next bytes begin a request line."""

    def wanted(self) -> bool:
        """Whether the next bytes are (part of) a request line to check."""
        return self._line is not None or self.between

    def feed(self, data: bytes) -> None:
        """Check the line these bytes begin or continue; RejectedError if malformed."""
        line = (self._line or b"") + data
        start = 0
        while line.startswith(b"\r\n", start):
            start += 2  # empty lines before a request are allowed
        end = line.find(b"\r\n", start)
        self.between = False
        if end < 0:
            self._line = line  # the rest comes later; the head limit bounds it
            return
        self._line = None
        if _REQUEST_LINE.fullmatch(line, start, end) is None:
            raise RejectedError(400, "malformed request line")


class HeadFields:
    """The request head being parsed, as httptools hands it over, and the framing rules
    checked on it. One per connection: ``begin`` starts each request's head afresh (new
    containers, so an exchange keeps the ones it was given)."""

    __slots__ = ("expects_continue", "headers", "hosts", "known", "target")

    target: bytes
    headers: list[tuple[bytes, bytes]]
    known: dict[bytes, bytes]
    """The first value of each header name, for lookups."""
    expects_continue: bool
    hosts: int

    def __init__(self) -> None:
        self.begin()

    def begin(self) -> None:
        """A new request head starts."""
        self.target = b""
        self.headers = []
        self.known = {}
        self.expects_continue = False
        self.hosts = 0

    def add_target(self, url: bytes) -> None:
        """Part of the request target."""
        self.target += url

    def add_header(self, name: bytes, value: bytes) -> None:
        """One header (name lowercased, as ASGI wants); RejectedError for a coding we cannot undo.

        llhttp has already refused control characters (HTAB aside), CR, LF and NUL in
        values, obs-fold continuations and bad name tokens: test_proxy_server shows it.
        """
        name = name.lower()
        self.known.setdefault(name, value)
        if name == b"expect" and value.lower() == b"100-continue":
            self.expects_continue = True
        elif name == b"host":
            self.hosts += 1
        elif name == b"transfer-encoding" and value.strip().lower() != b"chunked":
            # llhttp takes any coding list ending in chunked; we could not undo the others.
            raise RejectedError(400, "only Transfer-Encoding: chunked is supported")
        self.headers.append((name, value))

    def check(self, version: str) -> None:
        """The rules that need the whole head (RFC 9112 3.2: exactly one Host in HTTP/1.1)."""
        if version == "1.1" and self.hosts != 1:
            raise RejectedError(400, "an HTTP/1.1 request must have exactly one Host header")


class MessageCallbacks(Protocol):
    """The parser callbacks a request's connection handles itself (``HttpProtocol``)."""

    def on_message_begin(self) -> None:
        """A request starts."""

    def on_headers_complete(self) -> None:
        """Its head is in."""

    def on_body(self, body: bytes) -> None:
        """Body bytes."""

    def on_message_complete(self) -> None:
        """Its body ended."""


class ParserCallbacks:
    """What a request parser calls: the connection's message callbacks, and the head's
    own methods for the target and each header, so that a header costs the one Python
    call httptools makes instead of a second one forwarded by the connection."""

    __slots__ = (
        "on_body", "on_header", "on_headers_complete", "on_message_begin",
        "on_message_complete", "on_url",
    )  # fmt: skip

    def __init__(self, conn: MessageCallbacks, head: HeadFields) -> None:
        self.on_message_begin = conn.on_message_begin
        self.on_url = head.add_target
        self.on_header = head.add_header
        self.on_headers_complete = conn.on_headers_complete
        self.on_body = conn.on_body
        self.on_message_complete = conn.on_message_complete


def split_target(target: bytes) -> tuple[str, bytes, bytes]:
    """The decoded path, raw path and query of an origin-form target (for ASGI's scope)."""
    try:
        # httptools' stubs say bytes for every part, but an absent part is None: read
        # them untyped, or the compiled build (libs/common/hatch_build.py) rejects None.
        url: Any = httptools.parse_url(target)
        raw_path: bytes | None = url.path
        query: bytes | None = url.query
        path = raw_path.decode("ascii") if raw_path is not None else None
    except (httptools.HttpParserInvalidURLError, UnicodeDecodeError) as exc:
        raise RejectedError(400, "invalid request target") from exc
    if raw_path is None or path is None:
        raise RejectedError(400, "invalid request target")
    return path, raw_path, query or b""
