"""The extender verbs: one implementation each, and the pipeline that serves them without
ASGI.

kube-scheduler calls /filter and /prioritize for every pod it places. At a thousand nodes
the placement itself is well under a millisecond, and uvicorn's HTTP and ASGI layers plus
FastAPI's middlewares cost about as much again (bench/RESULTS.md, 2026-12-04).
``VerbsPipeline`` serves the verbs' POSTs on ``flexinfer_common.http1``'s protocol, as the
proxy serves its OpenAI routes: admin auth, the body limit, the request metrics and the
error answers are done here, the same as the app's middlewares and handlers do them. The
FastAPI routes stay: they document the verbs in the OpenAPI, answer other methods and any
server without a pipeline (tests over ASGI), and call the same ``ExtenderVerbs``. With
tracing on, each verb gets a server span here, its parent the caller's ``traceparent``
once validated, as the instrumented app gives every other route.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

import orjson
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer
from starlette.responses import Response

from flexinfer_common.auth import AdminTokens, AuthenticationError, authorization
from flexinfer_common.errors import BodyTooLargeError, FlexInferError
from flexinfer_common.http1.body_stream import ClientGoneError, read_prefix
from flexinfer_common.http1.downstream import Downstream
from flexinfer_common.http_metrics import HttpRequestMetrics
from flexinfer_common.trace_context import TRACEPARENT, parent_context
from flexinfer_common.web import flexinfer_error_response, openai_error
from flexinfer_scheduler.core.extender import Extender
from flexinfer_scheduler.core.protocol import BadExtenderArgsError, ExtenderRequest, parse_args
from flexinfer_scheduler.metrics import SchedulerMetrics

_JSON = (b"content-type", b"application/json")


@dataclass(frozen=True, slots=True)
class Answer:
    """A verb's whole JSON answer: status, body and any headers beyond its content type."""

    status: int
    body: bytes
    headers: tuple[tuple[bytes, bytes], ...] = ()

    @classmethod
    def of(cls, response: Response) -> Answer:
        """An error ``JSONResponse`` (``openai_error``) as an Answer."""
        framing = (b"content-length", b"content-type")
        extra = tuple((k, v) for k, v in response.raw_headers if k not in framing)
        return cls(response.status_code, bytes(response.body), extra)

    def response(self) -> Response:
        """As a Starlette response (the FastAPI routes)."""
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in self.headers}
        return Response(self.body, self.status, headers, media_type="application/json")

    def head(self) -> list[tuple[bytes, bytes]]:
        """The headers a Downstream writes (it adds the framing)."""
        return [_JSON, *self.headers]


Verb = Callable[[bytes], Awaitable[Answer]]


class Gate(Protocol):
    """What the verbs need of the app's sync gate (``app.SyncGate``)."""

    async def passes(self) -> bool:
        """Whether requests may be decided now."""

    def error(self) -> str:
        """What a request held too long is told."""


def _bad_request(message: str) -> Answer:
    return Answer.of(openai_error(400, message, code="invalid_extender_args"))


class ExtenderVerbs:
    """/filter and /prioritize (and its alias /score): request body -> answer."""

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

    def _parsed(self, body: bytes) -> ExtenderRequest | Answer:
        try:
            return parse_args(orjson.loads(body), self._sink)
        except (ValueError, UnicodeDecodeError) as exc:  # BadExtenderArgsError, JSONDecodeError
            return _bad_request(
                str(exc) if isinstance(exc, BadExtenderArgsError) else f"not JSON: {exc}"
            )

    async def filter(self, body: bytes) -> Answer:
        """ExtenderArgs -> ExtenderFilterResult (passing nodes, failedNodes reasons)."""
        args = self._parsed(body)
        if isinstance(args, Answer):
            return args
        if not await self._gate.passes():
            # The protocol's own error field: kube-scheduler reports it as the extender's.
            failed: dict[str, Any] = {"failedNodes": {}, "failedAndUnresolvableNodes": {}}
            result = {"nodenames": [], **failed, "error": self._gate.error()}
            return Answer(200, json.dumps(result, separators=(",", ":")).encode())
        with self._filter_latency.time():
            return Answer(200, self._extender().filter(args))

    async def prioritize(self, body: bytes) -> Answer:
        """ExtenderArgs -> HostPriorityList (scores 0..10)."""
        args = self._parsed(body)
        if isinstance(args, Answer):
            return args
        if not await self._gate.passes():
            # A HostPriorityList has no error field: a non-200 is kube-scheduler's error.
            message = self._gate.error()
            headers = {"Retry-After": "1"}
            return Answer.of(openai_error(503, message, code="not_synced", headers=headers))
        with self._prioritize_latency.time():
            return Answer(200, await self._extender().prioritize(args))

    def by_path(self) -> dict[str, Verb]:
        """Each verb's path."""
        return {"/filter": self.filter, "/prioritize": self.prioritize, "/score": self.prioritize}


@dataclass(frozen=True, slots=True)
class BodyLimits:
    """How much of a request body the pipeline reads, and how slowly it may come."""

    max_bytes: int
    timeout_s: float


class VerbsPipeline:
    """``flexinfer_common.http1.downstream.Pipeline``: POSTs to the verb paths, whole."""

    def __init__(
        self,
        verbs: dict[str, Verb],
        *,
        tokens: AdminTokens | None,
        limits: BodyLimits,
        requests: HttpRequestMetrics | None,
        tracer: Tracer | None = None,
    ) -> None:
        """``tokens``: required on every verb (None: open); ``requests``: where each
        answered request is recorded (None: request metrics are off); ``tracer``: each
        request's server span (None: tracing is off)."""
        self._verbs = {path.encode(): (path, verb) for path, verb in verbs.items()}
        self._tokens = tokens
        self._limits = limits
        self._requests = requests
        self._tracer = tracer

    def handles(self, method: str, target: bytes) -> bool:
        """POSTs to a verb's path; everything else is the app's (405s, 404s, the rest)."""
        return method == "POST" and target.partition(b"?")[0] in self._verbs

    async def serve(self, downstream: Downstream) -> None:
        """Authorise, read the body, answer, and record the request."""
        start = time.perf_counter()
        path, verb = self._verbs[downstream.target.partition(b"?")[0]]
        span = None if self._tracer is None else self._span(downstream, path)
        try:
            answer = await self._answer(downstream, verb)
            await downstream.respond(answer.status, answer.head(), answer.body)
        except ClientGoneError:
            if span is not None:
                span.end()
            return  # nobody to answer or to count: the server has cancelled the request
        except BaseException as exc:
            if span is not None:
                span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
                span.end()
            raise
        if span is not None:
            span.set_attribute("http.response.status_code", answer.status)
            if answer.status >= 500:
                span.set_status(Status(StatusCode.ERROR))
            span.end()
        if self._requests is not None:
            self._record(self._requests, downstream, path, answer, start)

    @staticmethod
    def _record(
        requests: HttpRequestMetrics,
        downstream: Downstream,
        path: str,
        answer: Answer,
        start: float,
    ) -> None:
        length = downstream.header(b"content-length")
        requests.record(
            "POST",
            path,
            str(answer.status),
            time.perf_counter() - start,
            request_bytes=int(length) if length is not None and length.isdigit() else 0,
            response_bytes=len(answer.body),
        )

    def _span(self, downstream: Downstream, path: str) -> Span:
        assert self._tracer is not None
        return self._tracer.start_span(
            f"POST {path}",
            context=parent_context(downstream.header(TRACEPARENT)),
            kind=SpanKind.SERVER,
            attributes={"http.request.method": "POST", "http.route": path},
        )

    async def _answer(self, downstream: Downstream, verb: Verb) -> Answer:
        if self._tokens is not None:
            try:
                self._tokens.check(authorization(downstream.headers))
            except AuthenticationError as exc:
                headers = {"WWW-Authenticate": exc.challenge}
                return Answer.of(openai_error(401, str(exc), code="unauthorized", headers=headers))
        try:
            return await verb(await self._body(downstream))
        except FlexInferError as exc:  # a body too large or too slow, a store unavailable
            return Answer.of(flexinfer_error_response(exc))

    async def _body(self, downstream: Downstream) -> bytes:
        limit = self._limits.max_bytes
        body = downstream.body_now()  # the usual case: it came with the head
        if body is None:
            # One past the limit, so that a body of exactly the limit is read whole.
            body, _ = await read_prefix(
                downstream.receive, limit + 1, limit, self._limits.timeout_s
            )
        elif len(body) > limit:
            raise BodyTooLargeError(f"request body exceeds {limit} bytes")
        return body
