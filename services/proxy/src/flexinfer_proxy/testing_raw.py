"""Raw-socket test helpers: a scripted TCP engine and a byte-level HTTP client.

For the cases an HTTP library hides: an engine that closes a kept-alive connection, cuts
an answer short or never answers, and clients that pipeline or vanish mid-request.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, int], Awaitable[None]]
OK = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"


@asynccontextmanager
async def raw_server(handler: Handler) -> AsyncIterator[tuple[str, list[int]]]:
    """A TCP server calling ``handler(reader, writer, connection_index)``; yields its URL
    and the list of connection indexes seen so far."""
    seen: list[int] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(len(seen))
        try:
            await handler(reader, writer, seen[-1])
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await writer.wait_closed()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", seen
    finally:
        server.close()
        await server.wait_closed()


async def read_request(reader: asyncio.StreamReader) -> bytes:
    """One request head and its Content-Length body."""
    head = await reader.readuntil(b"\r\n\r\n")
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return head + await reader.readexactly(int(line.split(b":")[1]))
    return head


class Conn:
    """A raw client connection: write bytes, read whole HTTP responses."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    async def send(self, data: bytes) -> None:
        """Write ``data`` now."""
        self.writer.write(data)
        await self.writer.drain()

    async def response(self) -> tuple[int, dict[str, str], bytes]:
        """Read one response: status, headers, body (Content-Length or chunked)."""
        head = await asyncio.wait_for(self.reader.readuntil(b"\r\n\r\n"), 5)
        lines = head.decode().split("\r\n")
        status = int(lines[0].split()[1])
        headers = dict(line.lower().split(": ", 1) for line in lines[1:] if line)
        if "content-length" in headers:
            body = await self.reader.readexactly(int(headers["content-length"]))
        elif headers.get("transfer-encoding") == "chunked":
            body = b""
            while size := int((await self.reader.readuntil(b"\r\n")).strip(), 16):
                body += (await self.reader.readexactly(size + 2))[:-2]
            await self.reader.readexactly(2)
        else:
            body = b""
        return status, headers, body

    async def closed(self) -> bool:
        """Whether the server closed the connection (EOF within 5 s)."""
        try:
            return await asyncio.wait_for(self.reader.read(1), 5) == b""
        except ConnectionError:
            return True


@asynccontextmanager
async def connect(url: str) -> AsyncIterator[Conn]:
    """A raw connection to ``url``."""
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        yield Conn(reader, writer)
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await writer.wait_closed()


def post(path: str, body: bytes, extra: bytes = b"") -> bytes:
    """A POST with a Content-Length JSON body."""
    head = b"POST %s HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n" % path.encode()
    return head + b"content-length: %d\r\n%s\r\n%s" % (
        len(body),
        extra,
        body,
    )
