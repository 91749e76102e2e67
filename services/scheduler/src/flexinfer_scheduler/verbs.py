"""The extender verbs over plain ASGI: one implementation each, served without FastAPI's
routing.

kube-scheduler calls /filter and /prioritize for every pod it places, and at a thousand
nodes the request's own work is well under a millisecond: FastAPI's per-request layers
(the router's matching, the endpoint's Request and dependency solving, the exception
middleware) were a measurable share of it (bench/RESULTS.md, 2026-12-04). ``VerbsFastPath``
sits innermost among the app's middlewares, so admin auth, the request metrics, tracing
and the 500 handler still wrap it exactly as they wrap routes; it answers POSTs to the verb
paths itself. The FastAPI routes stay (they document the verbs in the OpenAPI and answer
whatever the fast path passes on, such as another method) and call the same ``ExtenderVerbs``.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from flexinfer_common.errors import FlexInferError
from flexinfer_common.web import openai_error
from flexinfer_scheduler.core.extender import Extender
from flexinfer_scheduler.core.protocol import BadExtenderArgsError, ExtenderRequest, parse_args
from flexinfer_scheduler.metrics import SchedulerMetrics

Verb = Callable[[bytes], Awaitable[Response]]


class Gate(Protocol):
    """What the verbs need of the app's sync gate (``app.SyncGate``)."""

    async def passes(self) -> bool:
        """Whether requests may be decided now."""

    def error(self) -> str:
        """What a request held too long is told."""


def _bad_request(message: str) -> Response:
    return openai_error(400, message, code="invalid_extender_args")


def _json(body: Any) -> Response:
    return Response(json.dumps(body, separators=(",", ":")), media_type="application/json")


class ExtenderVerbs:
    """/filter and /prioritize (and its alias /score): request body -> response."""

    def __init__(
        self,
        extender: Callable[[], Extender],
        sink: Any,
        gate: Gate,
        metrics: SchedulerMetrics,
    ) -> None:
        self._extender = extender
        self._sink = sink
        self._gate = gate
        self._filter_latency = metrics.latency.labels("filter")
        self._prioritize_latency = metrics.latency.labels("prioritize")

    def _parsed(self, body: bytes) -> ExtenderRequest | Response:
        try:
            return parse_args(json.loads(body), self._sink)
        except (ValueError, UnicodeDecodeError) as exc:  # BadExtenderArgsError, JSONDecodeError
            return _bad_request(
                str(exc) if isinstance(exc, BadExtenderArgsError) else f"not JSON: {exc}"
            )

    async def filter(self, body: bytes) -> Response:
        """ExtenderArgs -> ExtenderFilterResult (passing nodes, failedNodes reasons)."""
        args = self._parsed(body)
        if isinstance(args, Response):
            return args
        if not await self._gate.passes():
            # The protocol's own error field: kube-scheduler reports it as the extender's.
            failed: dict[str, Any] = {"failedNodes": {}, "failedAndUnresolvableNodes": {}}
            return _json({"nodenames": [], **failed, "error": self._gate.error()})
        with self._filter_latency.time():
            answer = self._extender().filter(args)
        return Response(answer, media_type="application/json")

    async def prioritize(self, body: bytes) -> Response:
        """ExtenderArgs -> HostPriorityList (scores 0..10)."""
        args = self._parsed(body)
        if isinstance(args, Response):
            return args
        if not await self._gate.passes():
            # A HostPriorityList has no error field: a non-200 is kube-scheduler's error.
            message = self._gate.error()
            return openai_error(503, message, code="not_synced", headers={"Retry-After": "1"})
        with self._prioritize_latency.time():
            answer = await self._extender().prioritize(args)
        return Response(answer, media_type="application/json")

    def by_path(self) -> dict[str, Verb]:
        """Each verb's path."""
        return {"/filter": self.filter, "/prioritize": self.prioritize, "/score": self.prioritize}


async def read_body(receive: Receive) -> bytes:
    """The whole request body (ASGI ``http.request`` messages until no ``more_body``)."""
    message = await receive()
    body: bytes = message.get("body", b"")
    if not message.get("more_body", False):
        return body  # one message: the usual case for a body the size of ExtenderArgs
    chunks = [body]
    while message.get("more_body", False):
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunks.append(message.get("body", b""))
    return b"".join(chunks)


class VerbsFastPath:
    """ASGI middleware: POSTs to the verb paths are answered here, the rest pass on."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        verbs: dict[str, Verb],
        on_error: Callable[[Scope, FlexInferError], Awaitable[Response]],
    ) -> None:
        self.app = app
        self._verbs = verbs
        self._on_error = on_error

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer a verb's POST; pass anything else to the app."""
        verb = self._verbs.get(scope["path"]) if scope["type"] == "http" else None
        if verb is None or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        try:
            response = await verb(await read_body(receive))
        except FlexInferError as exc:
            # As the app's exception handler answers it for a route.
            response = await self._on_error(scope, exc)
        await response(scope, receive, send)
