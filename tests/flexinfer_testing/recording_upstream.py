"""A recording engine for black-box proxy tests: an asyncio TCP server parsing with h11.

It keeps what the proxy really sent (each request's raw request-target, header list and
body bytes, every byte received per connection) and answers each request, on kept-alive
connections, with a small JSON body naming it (``{"seq", "conn", "target"}``), so a client
of the proxy can tell whose answer it got. Bytes h11 cannot parse are recorded as a
protocol error and the connection is closed, as a strict engine would.

A request whose body holds ``SLOW_MARKER`` stands for a long generation: its answer is
written only when more bytes arrive on its connection (or never, if the connection
closes first). That orders, without any timing, what a slow engine makes likely: the
answer to a request smuggled behind another one comes after the proxy reused the
connection for the next client.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import h11

_MAX_EVENT = 1024 * 1024
"""Largest head h11 buffers: above the proxy's own 64 KiB head limit."""
SLOW_MARKER = b"slow-generation"


@dataclass(frozen=True)
class Recorded:
    """One request the engine received, as it was on the wire (h11 only framed it)."""

    seq: int
    conn: int
    method: bytes
    target: bytes
    headers: list[tuple[bytes, bytes]]
    body: bytes


def answer_body(seq: int, conn: int, target: bytes) -> bytes:
    """The body the engine answers request ``seq`` with."""
    return json.dumps({"seq": seq, "conn": conn, "target": target.decode("latin-1")}).encode()


def answer_seq(body: bytes) -> int | None:
    """The ``seq`` of an engine answer relayed to a client, None when it is not one."""
    try:
        data = json.loads(body)
    except ValueError:
        return None
    seq = data.get("seq") if isinstance(data, dict) else None
    return seq if isinstance(seq, int) else None


@dataclass
class RecordingUpstream:
    """What the engine saw, in arrival order (shared with its connection handlers)."""

    url: str = ""
    requests: list[Recorded] = field(default_factory=list)
    protocol_errors: list[str] = field(default_factory=list)
    wire: dict[int, bytearray] = field(default_factory=dict)
    """Every byte received, per connection index."""
    open_connections: set[int] = field(default_factory=set)

    def since(self, mark: int) -> list[Recorded]:
        """The requests recorded after the first ``mark`` ones."""
        return self.requests[mark:]

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Serve one connection until either side closes it."""
        conn = len(self.wire)
        self.wire[conn] = bytearray()
        self.open_connections.add(conn)
        try:
            await self._serve(conn, reader, writer)
        except h11.RemoteProtocolError as exc:
            self.protocol_errors.append(f"connection {conn}: {exc}")
        except ConnectionError:
            pass
        finally:
            self.open_connections.discard(conn)
            writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await writer.wait_closed()

    async def _serve(
        self, conn: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        parser = h11.Connection(h11.SERVER, max_incomplete_event_size=_MAX_EVENT)
        head: h11.Request | None = None
        body = bytearray()
        while True:
            event = parser.next_event()
            if event is h11.NEED_DATA:
                data = await reader.read(65536)
                self.wire[conn] += data
                parser.receive_data(data)
            elif isinstance(event, h11.Request):
                head, body = event, bytearray()
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                assert head is not None
                answer = self._answer(parser, conn, head, bytes(body))
                if SLOW_MARKER in body and not parser.trailing_data[0]:
                    data = await reader.read(65536)  # the next request (or EOF) first
                    self.wire[conn] += data
                    parser.receive_data(data)
                    if not data:
                        return
                writer.write(answer)
                await writer.drain()
                if parser.our_state is not h11.DONE or parser.their_state is not h11.DONE:
                    return  # Connection: close, or HTTP/1.0
                parser.start_next_cycle()
            else:
                return  # ConnectionClosed (or PAUSED, which a server never sees here)

    def _answer(self, parser: h11.Connection, conn: int, head: h11.Request, body: bytes) -> bytes:
        seq = len(self.requests)
        self.requests.append(
            Recorded(seq, conn, head.method, head.target, list(head.headers.raw_items()), body)
        )
        payload = answer_body(seq, conn, head.target)
        headers = [("content-type", "application/json"), ("content-length", str(len(payload)))]
        start = parser.send(h11.Response(status_code=200, headers=headers)) or b""
        data = parser.send(h11.Data(data=payload)) or b""
        end = parser.send(h11.EndOfMessage()) or b""
        return start + data + end


@asynccontextmanager
async def recording_upstream() -> AsyncIterator[RecordingUpstream]:
    """A RecordingUpstream listening on a free loopback port for the block."""
    upstream = RecordingUpstream()
    handlers: set[asyncio.Task[None]] = set()
    writers: set[asyncio.StreamWriter] = set()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        handlers.add(task)
        writers.add(writer)
        try:
            await upstream.serve(reader, writer)
        finally:
            writers.discard(writer)
            handlers.discard(task)

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    upstream.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    try:
        yield upstream
    finally:
        server.close()
        for writer in list(writers):
            writer.transport.abort()  # the handler's read ends: it returns by itself
        await asyncio.gather(*handlers, return_exceptions=True)
        await server.wait_closed()
