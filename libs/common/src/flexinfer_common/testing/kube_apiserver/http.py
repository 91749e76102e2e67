"""The HTTP side: a threaded server whose handler turns requests into ``rest`` calls.

Plain answers carry a Content-Length and keep the connection alive (the client pools
connections); a watch is a chunked stream of JSON lines on a connection closed at its end.
"""

from __future__ import annotations

import contextlib
import json
import socket
import sys
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from flexinfer_common.testing.kube_apiserver.errors import ApiError
from flexinfer_common.testing.kube_apiserver.rest import Answer, Request

Serve = Callable[[Request, "Handler"], None]


class Handler(BaseHTTPRequestHandler):
    """One connection; every method goes to the server's ``serve`` callable."""

    protocol_version = "HTTP/1.1"  # keep-alive, as the client's connection pool expects
    wbufsize = 1 << 16  # headers and body leave together (no Nagle/delayed-ACK stall)
    server: ApiHttpServer

    def setup(self) -> None:
        """Track the connection so that stopping the server can cut it."""
        super().setup()
        self.server.track(self.connection, add=True)

    def finish(self) -> None:
        """Forget the connection."""
        try:
            super().finish()
        finally:
            self.server.track(self.connection, add=False)

    def _dispatch(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        parts = urlsplit(self.path)
        content_type = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            self.send_json(Answer(400, ApiError(400, "the body is not JSON").status()))
            return
        request = Request(
            self.command, parts.path, dict(parse_qsl(parts.query)), body, content_type
        )
        self.server.serve(request, self)

    def do_GET(self) -> None:
        """GET: get, list, watch, pods/log."""
        self._dispatch()

    def do_POST(self) -> None:
        """POST: create."""
        self._dispatch()

    def do_PUT(self) -> None:
        """PUT: update (main resource or /status)."""
        self._dispatch()

    def do_PATCH(self) -> None:
        """PATCH: patch (main resource or /status)."""
        self._dispatch()

    def do_DELETE(self) -> None:
        """DELETE: delete."""
        self._dispatch()

    def send_json(self, answer: Answer) -> None:
        """A complete JSON (or text) answer."""
        if answer.text is not None:
            data, kind = answer.text.encode(), "text/plain"
        else:
            data, kind = json.dumps(answer.body).encode(), "application/json"
        self.send_response(answer.code)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        for name, value in answer.extra.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def start_stream(self, content_type: str = "application/json") -> None:
        """The headers of a watch (or a followed log): 200, chunked, closed at the end."""
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.flush()
        self.close_connection = True

    def send_line(self, event: dict[str, Any]) -> None:
        """One watch event as one chunk."""
        self.send_chunk(json.dumps(event).encode() + b"\n")

    def send_chunk(self, data: bytes) -> None:
        """One chunk of a stream, sent at once."""
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def end_stream(self, *, abrupt: bool) -> None:
        """The last chunk, or (``abrupt``) a cut connection, as a dropped stream looks."""
        if abrupt:
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: tests assert on behaviour, not on access logs."""


class ApiHttpServer(ThreadingHTTPServer):
    """A threaded HTTP server on a free loopback port, handing requests to ``serve``."""

    daemon_threads = True

    def __init__(self, serve: Serve) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.serve = serve
        self._connections: set[socket.socket] = set()
        self._lock = threading.Lock()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hung up mid-answer is routine (a watch or a test ending), and a real
        apiserver logs nothing for it; anything else is reported as socketserver does."""
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)

    def track(self, conn: socket.socket, *, add: bool) -> None:
        """Remember (or forget) an open connection."""
        with self._lock:
            if add:
                self._connections.add(conn)
            else:
                self._connections.discard(conn)

    def cut_connections(self) -> None:
        """Shut every open connection down, so that no handler thread outlives the server."""
        with self._lock:
            conns = list(self._connections)
        for conn in conns:
            with contextlib.suppress(OSError):  # already closed by its peer
                conn.shutdown(socket.SHUT_RDWR)
