"""Test helpers: serve an ASGI app on a real socket, and a scriptable OpenAI-like upstream.

The upstream is a test double for a remote model server: a real HTTP server on port 0
that answers like an OpenAI engine, can stream slowly, and can die mid-stream.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from starlette.types import Receive, Scope, Send

from flexinfer_common.api import Model, ModelSpec, ObjectMeta
from flexinfer_common.api.model import LiteLLMSpec, ServerlessSpec


def make_model(
    name: str,
    *,
    namespace: str = "default",
    served_name: str | None = None,
    aliases: list[str] | None = None,
    cold_start_timeout_s: float | None = None,
    idle_timeout_s: float = 300.0,
    backend: str = "reference",
) -> Model:
    """A minimal Model for tests."""
    cold_start = None if cold_start_timeout_s is None else timedelta(seconds=cold_start_timeout_s)
    return Model(
        metadata=ObjectMeta(name=name, namespace=namespace),
        spec=ModelSpec(
            backend=backend,
            source=f"file:///models/{name}",
            litellm=LiteLLMSpec(served_model_name=served_name, aliases=aliases or []),
            serverless=ServerlessSpec(
                cold_start_timeout=cold_start,
                idle_timeout=timedelta(seconds=idle_timeout_s),
            ),
        ),
    )


@dataclass
class Seen:
    """One request the fake upstream received."""

    path: str
    body: bytes
    headers: dict[str, str]
    at: float

    def json(self) -> Any:
        """The body parsed as JSON."""
        return json.loads(self.body)


@dataclass
class FakeUpstream:
    """An OpenAI-like ASGI server: /v1/chat/completions, /v1/completions, /v1/embeddings."""

    name: str = "upstream"
    chunks: int = 3
    chunk_delay_s: float = 0.0
    die_after_chunks: int | None = None
    status: int = 200
    seen: list[Seen] = field(default_factory=list)
    finished_at: list[float] = field(default_factory=list)
    aborted: int = 0
    """Streams that stopped because the proxy closed the connection."""
    serves: list[str] = field(default_factory=list)
    """The model ids GET /v1/models lists."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer one request."""
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        body = await _read_all(receive)
        headers = {k.decode(): v.decode() for k, v in scope["headers"]}
        if self.status != 200:
            error = {"error": {"message": "upstream says no", "type": "x", "code": "nope"}}
            await _send_json(send, error, self.status)
            return
        if scope["method"] == "GET" and scope["path"] == "/v1/models":
            data = [{"id": name, "object": "model"} for name in self.serves]
            await _send_json(send, {"object": "list", "data": data}, 200)
            return
        self.seen.append(Seen(scope["path"], body, headers, time.monotonic()))
        try:
            request = json.loads(body)
        except ValueError:
            await _send_json(send, {"error": {"message": "bad json"}}, 400)
            return
        if request.get("stream"):
            gone = asyncio.create_task(_wait_disconnect(receive))
            try:
                await self._stream(send, request, gone)
            finally:
                gone.cancel()
            if gone.done() and not gone.cancelled():
                self.aborted += 1
                return
        else:
            await _send_json(send, self._completion(scope["path"], request), 200)
        self.finished_at.append(time.monotonic())

    def _completion(self, path: str, request: dict[str, Any]) -> dict[str, Any]:
        model = request.get("model", "")
        if path.endswith("/embeddings"):
            return {
                "object": "list",
                "data": [{"object": "embedding", "index": 0, "embedding": [0.1, 0.2]}],
                "model": model,
                "usage": {"prompt_tokens": 1, "total_tokens": 1},
            }
        message = {"role": "assistant", "content": f"hello from {self.name}"}
        return {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 0,
            "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 3, "total_tokens": 4},
        }

    async def _stream(self, send: Send, request: dict[str, Any], gone: asyncio.Task[None]) -> None:
        headers = [(b"content-type", b"text/event-stream; charset=utf-8")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        for index in range(self.chunks):
            if self.die_after_chunks is not None and index >= self.die_after_chunks:
                raise ConnectionAbortedError("fake upstream dies mid-stream")
            if index and self.chunk_delay_s:
                await asyncio.sleep(self.chunk_delay_s)
            if gone.done():
                return
            chunk = {
                "id": "chatcmpl-1",
                "object": "chat.completion.chunk",
                "created": 0,
                "model": request.get("model", ""),
                "choices": [
                    {"index": 0, "delta": {"content": f"t{index} "}, "finish_reason": None}
                ],
            }
            data = b"data: " + json.dumps(chunk).encode() + b"\n\n"
            await send({"type": "http.response.body", "body": data, "more_body": True})
        await send({"type": "http.response.body", "body": b"data: [DONE]\n\n"})


async def _wait_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def _read_all(receive: Receive) -> bytes:
    parts: list[bytes] = []
    while True:
        message = await receive()
        parts.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(parts)


async def _send_json(send: Send, payload: Any, status: int) -> None:
    body = json.dumps(payload).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
