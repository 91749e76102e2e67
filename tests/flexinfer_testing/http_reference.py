"""h11 as the reference HTTP/1.1 parser of black-box proxy tests, both ways.

``parse_requests`` says what a strict server makes of a client's bytes: the requests in
them, in order, and what is left after them. ``AnswerReader`` reads a proxy's answers off
a client connection, each framed as h11 frames it, and notes bytes that are no answer.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Literal

import h11

_MAX_EVENT = 1024 * 1024
Tail = Literal["clean", "partial", "error", "after_close"]
"""After the parsed requests: nothing; an unfinished request; bytes h11 rejects; bytes
after a request that closes the connection (``Connection: close``, HTTP/1.0)."""


@dataclass(frozen=True)
class ParsedRequest:
    """One request as h11 parsed it (header names lowercased, the body de-chunked)."""

    method: bytes
    target: bytes
    version: bytes
    headers: list[tuple[bytes, bytes]]
    body: bytes


@dataclass(frozen=True)
class ParsedStream:
    """Every request in a client's bytes, then what follows them."""

    requests: list[ParsedRequest]
    tail: Tail
    error: str | None = None


def parse_requests(data: bytes) -> ParsedStream:
    """What h11, as a server, parses from ``data`` sent on one connection."""
    parser = h11.Connection(h11.SERVER, max_incomplete_event_size=_MAX_EVENT)
    parser.receive_data(data)
    requests: list[ParsedRequest] = []
    head: h11.Request | None = None
    body = bytearray()
    try:
        while True:
            event = parser.next_event()
            if isinstance(event, h11.Request):
                head, body = event, bytearray()
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                assert head is not None
                requests.append(_request(head, bytes(body)))
                head = None
                if not _next_cycle(parser):
                    tail: Tail = "after_close" if parser.trailing_data[0] else "clean"
                    return ParsedStream(requests, tail)
            else:
                assert event is h11.NEED_DATA
                pending = head is not None or bool(parser.trailing_data[0])
                return ParsedStream(requests, "partial" if pending else "clean")
    except h11.RemoteProtocolError as exc:
        return ParsedStream(requests, "error", str(exc))


def _request(head: h11.Request, body: bytes) -> ParsedRequest:
    headers = [(bytes(k), bytes(v)) for k, v in head.headers]
    return ParsedRequest(head.method, head.target, head.http_version, headers, body)


def _next_cycle(parser: h11.Connection) -> bool:
    """Answer the request (h11 needs that to parse the next); False: the connection ends.

    The stand-in answer is a 404, so that a CONNECT or an Upgrade is refused, not taken.
    """
    parser.send(h11.Response(status_code=404, headers=[("content-length", "0")]))
    parser.send(h11.EndOfMessage())
    if parser.our_state is not h11.DONE or parser.their_state is not h11.DONE:
        return False
    parser.start_next_cycle()
    return True


@dataclass(frozen=True)
class Answer:
    """One answer the proxy wrote."""

    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes

    def header(self, name: bytes) -> bytes | None:
        """The first value of header ``name`` (lowercase), if any."""
        return next((v for k, v in self.headers if k == name), None)


@dataclass
class AnswerReader:
    """Reads the proxy's answers on one client connection, in order."""

    reader: asyncio.StreamReader
    closed: bool = False
    """The proxy closed (or reset) the connection."""
    garbage: str | None = None
    """Why the last bytes read were no valid answer."""
    parser: h11.Connection = field(
        default_factory=lambda: h11.Connection(h11.CLIENT, max_incomplete_event_size=_MAX_EVENT)
    )
    _partial: bool = False
    """Bytes of the answer being read arrived."""

    async def next(self, timeout_s: float, method: bytes = b"POST") -> Answer | None:
        """The next whole answer; None on close, timeout (``closed`` False) or garbage."""
        parser = self.parser
        if self.closed or self.garbage is not None:
            return None
        if parser.our_state is h11.IDLE:
            # h11 pairs an answer with a request: a stand-in with the client's method.
            parser.send(h11.Request(method=method, target="/", headers=[("host", "proxy")]))
            parser.send(h11.EndOfMessage())
        self._partial = False
        try:
            async with asyncio.timeout(timeout_s):
                return await self._read()
        except TimeoutError:
            return None
        except h11.RemoteProtocolError as exc:
            if not self._closed_between_answers():
                self.garbage = str(exc)
            return None

    def _closed_between_answers(self) -> bool:
        """A plain close before any byte of the next answer (h11 calls it an error)."""
        return self.closed and not self._partial

    async def _read(self) -> Answer | None:
        parser = self.parser
        status = 0
        headers: list[tuple[bytes, bytes]] = []
        body = bytearray()
        while True:
            event = parser.next_event()
            if event is h11.NEED_DATA:
                parser.receive_data(await self._recv())
            elif isinstance(event, h11.Response):
                status, headers = (
                    event.status_code,
                    [(bytes(k), bytes(v)) for k, v in event.headers],
                )
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                if parser.our_state is h11.DONE and parser.their_state is h11.DONE:
                    parser.start_next_cycle()
                return Answer(status, headers, bytes(body))
            elif isinstance(event, h11.ConnectionClosed):
                self.closed = True
                return None
            # InformationalResponse (100 Continue): the final answer follows.

    async def _recv(self) -> bytes:
        try:
            data = await self.reader.read(65536)
        except ConnectionError:
            data = b""
        if data:
            self._partial = True
        else:
            self.closed = True
        return data
