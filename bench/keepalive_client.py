"""A lean HTTP/1.1 client for latency benchmarks: POSTs over one keep-alive socket.

``http.client`` parses every answer's head with the ``email`` package and builds several
objects per call: on these machines about 0.1 ms a call, as much as a small server's whole
answer, and nothing kube-scheduler's Go client spends. This one writes the request in one
``sendall`` and reads the answer framed by its Content-Length (anything else is an error:
the servers measured always send one), so what a benchmark measures is the server and
the loopback. bench/scheduler.py measures its ceilings with the same client, so its cost
shows in the ``floor`` column.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping


class KeepAliveClient:
    """POSTs to one server over one connection, one at a time."""

    def __init__(
        self, port: int, host: str = "127.0.0.1", headers: Mapping[str, str] | None = None
    ) -> None:
        self._sock = socket.create_connection((host, port))
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._host = host.encode()
        self._extra = b"".join(
            f"{name}: {value}\r\n".encode() for name, value in (headers or {}).items()
        )
        """Header lines every request carries beyond Host, Content-Type and -Length."""
        self._buffer = b""

    def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        """Send ``body`` to ``path`` as JSON; the answer's status and body."""
        head = (
            b"POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n%s\r\n" % (path.encode(), self._host, len(body), self._extra)
        )
        self._sock.sendall(head + body)
        return self._answer()

    def _answer(self) -> tuple[int, bytes]:
        while (end := self._buffer.find(b"\r\n\r\n")) < 0:
            self._buffer += self._recv()
        head, self._buffer = self._buffer[:end].split(b"\r\n"), self._buffer[end + 4 :]
        version, status, _ = head[0].split(b" ", 2)
        fields = dict(line.split(b":", 1) for line in head[1:])
        fields = {name.strip().lower(): value.strip() for name, value in fields.items()}
        if version != b"HTTP/1.1" or b"content-length" not in fields:
            raise RuntimeError(f"unexpected answer head: {head!r}")
        length = int(fields[b"content-length"])
        while len(self._buffer) < length:
            self._buffer += self._recv()
        body, self._buffer = self._buffer[:length], self._buffer[length:]
        if fields.get(b"connection", b"").lower() == b"close":
            raise RuntimeError("the server closed the connection")
        return int(status), body

    def _recv(self) -> bytes:
        data = self._sock.recv(262144)
        if not data:
            raise RuntimeError("the server closed the connection mid-answer")
        return data

    def close(self) -> None:
        """Close the connection."""
        self._sock.close()
