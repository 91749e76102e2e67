"""The client side of one request served by a pipeline, as the pipeline sees it.

Two implementations: the HTTP/1.1 server's ``Exchange`` (the default, with no per-request
ASGI messages) and ``AsgiDownstream`` over any ASGI server (uvicorn's stock protocols, as
the proxy's ``FLEXINFER_PROXY_SERVER=uvicorn`` selects). The pipeline never knows which one
it talks to.

When the client goes away before its answer is complete, the downstream cancels the task
serving the request and sets ``gone``: whatever the request waits for (an engine, the
cold-start queue, a slow body) ends there, and what it holds is released on the way out.
"""

from __future__ import annotations

import asyncio
import contextlib
from abc import ABC, abstractmethod
from collections.abc import Coroutine
from typing import Any, Protocol

from starlette.types import Message, Receive, Scope, Send

from flexinfer_common.http1.body_stream import ClientGoneError

Headers = list[tuple[bytes, bytes]]


class Downstream(ABC):
    """One request from a client and the answer going back to it."""

    method: str
    target: bytes
    """The request-target exactly as received (path and query, never decoded)."""
    headers: Headers
    """Request headers, names lowercased."""
    started: bool
    """The answer's head went out: an error can no longer change the status."""
    gone: bool
    """The client left before its answer was complete (the serving task was cancelled)."""
    headers_checked = False
    """The server's parser already refused control characters in header names and values."""

    def header(self, name: bytes) -> bytes | None:
        """The first value of request header ``name`` (lowercase), if any."""
        for key, value in self.headers:
            if key == name:
                return value
        return None

    @abstractmethod
    def body_now(self) -> bytes | None:
        """The whole request body if it has all arrived and none was taken, else None."""

    @abstractmethod
    async def receive(self) -> tuple[bytes, bool]:
        """The next body bytes and whether more follow; ClientGoneError if the client left."""

    @abstractmethod
    async def respond(self, status: int, headers: Headers, body: bytes) -> None:
        """Send a whole answer (the server frames it with a Content-Length)."""

    @abstractmethod
    async def start(self, status: int, headers: Headers) -> None:
        """Begin a streamed answer (framed by the server)."""

    @abstractmethod
    async def send(self, chunk: bytes) -> None:
        """More of a streamed answer."""

    @abstractmethod
    async def end(self) -> None:
        """The streamed answer is complete."""

    @abstractmethod
    def abort(self) -> None:
        """Cut the client's connection: the answer broke off and cannot be completed."""


class AsgiDownstream(Downstream):
    """A Downstream over ASGI ``receive``/``send`` (for servers other than our own)."""

    def __init__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.method = scope["method"]
        raw = scope.get("raw_path") or scope["path"].encode()
        query: bytes = scope.get("query_string", b"")
        self.target = raw + (b"?" + query if query else b"")
        self.headers = list(scope["headers"])
        self.started = False
        self.gone = False
        self._receive = receive
        self._send = send
        self._body_read = asyncio.Event()
        task = asyncio.current_task()
        assert task is not None, "an ASGI app runs in a task"
        self._watcher = asyncio.ensure_future(self._watch(task))

    def body_now(self) -> bytes | None:
        """An ASGI server hands the body over only through ``receive``: never at once."""
        return None

    async def receive(self) -> tuple[bytes, bool]:
        """The next ``http.request`` message."""
        message = await self._receive()
        if message["type"] == "http.disconnect":
            raise ClientGoneError
        more = bool(message.get("more_body", False))
        if not more:
            self._body_read.set()
        return message.get("body", b""), more

    async def respond(self, status: int, headers: Headers, body: bytes) -> None:
        """Start and finish in two ASGI messages."""
        await self.start(status, headers)
        self._watcher.cancel()
        await self._message({"type": "http.response.body", "body": body, "more_body": False})

    async def start(self, status: int, headers: Headers) -> None:
        """``http.response.start``."""
        self.started = True
        await self._message({"type": "http.response.start", "status": status, "headers": headers})

    async def send(self, chunk: bytes) -> None:
        """One body message."""
        await self._message({"type": "http.response.body", "body": chunk, "more_body": True})

    async def end(self) -> None:
        """The last body message."""
        self._watcher.cancel()
        await self._message({"type": "http.response.body", "body": b"", "more_body": False})

    def abort(self) -> None:
        """ASGI has no abort: raising from the app makes the server cut the connection."""
        raise ConnectionAbortedError("the upstream answer broke off")

    def close(self) -> None:
        """The request is over: stop watching for a disconnect."""
        self._watcher.cancel()

    async def _watch(self, task: asyncio.Task[None]) -> None:
        # receive() belongs to the body reader until the body is complete.
        await self._body_read.wait()
        with contextlib.suppress(Exception):
            while (await self._receive())["type"] != "http.disconnect":
                pass
            self.gone = True
            task.cancel()

    async def _message(self, message: Message) -> None:
        try:
            await self._send(message)
        except OSError as exc:  # the client went away while we wrote
            raise ClientGoneError from exc


class Pipeline(Protocol):
    """What the server hands the requests it handles to, without ASGI (the proxy's
    ``flexinfer_proxy.pipeline.Proxy``, the scheduler's verbs)."""

    def handles(self, method: str, target: bytes) -> bool:
        """Whether the request goes to the pipeline rather than the app."""

    def serve(self, downstream: Downstream) -> Coroutine[Any, Any, None]:
        """The work of serving one request."""
