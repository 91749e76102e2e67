"""The floor of any proxy written in Python: a byte relay on uvloop, with no HTTP at all.

Each client connection gets its own upstream connection, and every read on one side is
written to the other as it is. Nothing is parsed, routed, counted or checked, so it is not
a proxy anyone should run: it is what the event loop and the kernel cost per request on
this machine. A request through it takes the same system calls as one through our proxy
(a read and a write on each side, a wait for each), so the gap between the two is our
Python, and the gap between it and vllm-router is what Python's event loop costs against
Rust's on this machine.

    python bench/relay_floor.py --upstream http://127.0.0.1:PORT [--port 0] [--ready-file PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
from pathlib import Path
from typing import cast
from urllib.parse import urlsplit

import uvloop


class _Side(asyncio.Protocol):
    """One end of a relayed pair: what it reads goes to its peer's transport."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.peer: _Side | None = None
        self.pending: list[bytes] = []
        """What arrived before the peer connected (the client's first bytes)."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        peer = self.peer
        if peer is not None and peer.transport is not None:
            peer.transport.write(data)
        else:
            self.pending.append(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.close()


class _Client(_Side):
    """The client's side: it opens its own upstream connection as it is accepted."""

    def __init__(self, host: str, port: int) -> None:
        super().__init__()
        self._address = (host, port)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        asyncio.get_running_loop().create_task(self._connect())

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        _, upstream = await loop.create_connection(_Side, *self._address)
        upstream.peer, self.peer = self, upstream
        assert upstream.transport is not None
        for data in self.pending:
            upstream.transport.write(data)
        self.pending.clear()


def _announce(ready_file: Path, url: str) -> None:
    """Write ``url`` whole at once: the bench polls for the file and reads it at once."""
    tmp = ready_file.with_suffix(".tmp")
    tmp.write_text(url + "\n")
    os.replace(tmp, ready_file)


async def serve(upstream: str, port: int, ready_file: Path | None) -> None:
    """Relay 127.0.0.1:``port`` to ``upstream`` until cancelled."""
    parts = urlsplit(upstream)
    host, up_port = parts.hostname or "127.0.0.1", parts.port or 80
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _Client(host, up_port), "127.0.0.1", port)
    bound = server.sockets[0].getsockname()[1]
    if ready_file is not None:
        _announce(ready_file, f"http://127.0.0.1:{bound}")
    async with server:
        await server.serve_forever()


def main() -> None:
    """Parse the arguments and relay until killed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--ready-file", type=Path)
    args = parser.parse_args()
    uvloop.run(serve(args.upstream, args.port, args.ready_file))


if __name__ == "__main__":
    main()
