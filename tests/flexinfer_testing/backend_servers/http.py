"""The HTTP side the backend stand-ins share: JSON routes, an OpenAI chat reply, a record.

Stdlib only: a stand-in starts in tens of milliseconds, so a test takes a real controller
through a backend's whole launch without the backend's weight (or a GPU).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

Reply = tuple[int, Any]
"""(status, body): a str body is sent as text/plain, None as no body, anything else as JSON."""
GetRoute = Callable[[], Reply]
PostRoute = Callable[[dict[str, Any]], Reply]


def record_launch(records: Path, name: str, argv: list[str], env: Iterable[str] = ()) -> None:
    """Write what the stand-in was started with (argv, chosen env) for the test to assert on."""
    records.mkdir(parents=True, exist_ok=True)
    entry = {"argv": argv, "env": {k: os.environ[k] for k in env if k in os.environ}}
    (records / f"{name}-{os.getpid()}.json").write_text(json.dumps(entry))


def read_records(records: Path, name: str) -> list[dict[str, Any]]:
    """Every launch of stand-in ``name`` recorded under ``records``, oldest first."""
    paths = sorted(records.glob(f"{name}-[0-9]*.json"), key=lambda p: p.stat().st_mtime_ns)
    return [json.loads(p.read_text()) for p in paths]


def openai_error(status: int, message: str) -> Reply:
    """An OpenAI-style error body."""
    kind = "invalid_request_error" if status < 500 else "server_error"
    return status, {"error": {"message": message, "type": kind, "param": None, "code": status}}


def chat_reply(model: str, body: Mapping[str, Any]) -> Reply:
    """A chat.completion answering ``body`` as ``model`` (400 when messages are missing)."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return openai_error(400, "messages must be a non-empty list")
    message = {"role": "assistant", "content": "stand-in reply"}
    return 200, {
        "id": f"chatcmpl-{os.getpid()}-{time.monotonic_ns()}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": len(messages), "completion_tokens": 2, "total_tokens": 3},
    }


def serve(host: str, port: int, get: Mapping[str, GetRoute], post: Mapping[str, PostRoute]) -> None:
    """Serve the routes on host:port until killed (the runtime stops engines by signal)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            route = get.get(self.path.split("?", 1)[0])
            self._send(*(route() if route else (404, {"error": "not found"})))

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
            except ValueError:
                self._send(*openai_error(400, "body is not JSON"))
                return
            route = post.get(self.path.split("?", 1)[0])
            self._send(*(route(body) if route else (404, {"error": "not found"})))

        def _send(self, status: int, body: Any) -> None:
            if body is None:
                data, kind = b"", "application/json"
            elif isinstance(body, str):
                data, kind = body.encode(), "text/plain; charset=utf-8"
            else:
                data, kind = json.dumps(body).encode(), "application/json"
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    ThreadingHTTPServer((host, port), Handler).serve_forever()
