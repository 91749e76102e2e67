"""The request pipeline: each proxied request is one ``ProxyRequest``, arrival to last byte.

In order: check the raw target (400), authenticate (401), check the route (404), read the
body only as far as needed to find the model (400/408/413), resolve the model (404), check
the route against its backend's surface (404), authorize (403) and rate-limit (429). Then
the request counts as active for its model, waits for an endpoint if the model has none
(failing at once if the controller says it cannot start, or if its external endpoints are
all unreachable), is forwarded through the upstream transport, and the answer is relayed.

A ``ProxyRequest`` alone begins and ends the request's accounting (model activity,
endpoint load, the answered-requests counter), each exactly once, in ``run``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine
from typing import Any

from opentelemetry.trace import Span, Status, StatusCode
from starlette.types import Receive, Scope, Send

from flexinfer_common.api import LoRAAdapter, LoRAAdapterPhase
from flexinfer_common.bus.topics import EndpointInfo
from flexinfer_common.errors import FlexInferError
from flexinfer_common.http1.body_stream import BodyStream, ClientGoneError
from flexinfer_common.http1.downstream import AsgiDownstream, Downstream
from flexinfer_common.logcontext import bind as bind_log_fields
from flexinfer_common.trace_context import TRACEPARENT
from flexinfer_proxy.core.catalog import Target, adapter_queue
from flexinfer_proxy.core.errors import (
    MethodNotAllowedError,
    ModelNotFoundError,
    ModelUnavailableError,
    RouteNotFoundError,
    UpstreamError,
)
from flexinfer_proxy.core.extract import check_model_name
from flexinfer_proxy.core.metrics import NO_ROUTE
from flexinfer_proxy.core.ratelimit import RateLimitedError
from flexinfer_proxy.core.routing.base import RouteContext
from flexinfer_proxy.core.service import HotModel, ProxyCore
from flexinfer_proxy.core.surface import Surface
from flexinfer_proxy.core.target import RequestTarget, parse_target
from flexinfer_proxy.error_answers import error_answer, error_code
from flexinfer_proxy.extract_http import IncomingRequest, read_request, request_now
from flexinfer_proxy.relay import (
    SSE_HEADERS,
    relay_as_event,
    relay_stream,
    request_headers,
    response_headers,
    sse_comment,
    sse_error,
)
from flexinfer_proxy.tracing import REQUEST_ID, RequestTrace, request_id
from flexinfer_proxy.transport.base import (
    ConnectFailedError,
    RequestFailedError,
    UpstreamAnswer,
    UpstreamRequest,
    UpstreamTransport,
)

log = logging.getLogger(__name__)

PROGRESS_HEADER = b"x-flexinfer-progress"
"""A non-streaming request that sets it to true gets progress lines while it waits."""
_TRUE = (b"1", b"true", b"yes")


class Proxy:
    """The proxied routes: which requests they take, and a ``ProxyRequest`` for each."""

    def __init__(self, core: ProxyCore, transport: UpstreamTransport, surface: Surface) -> None:
        self.core = core
        self.transport = transport
        self.surface = surface

    def handles(self, method: str, target: bytes) -> bool:
        """Every POST but to the app's own paths, and any method on a proxied route (which
        gets its 405): the pipeline checks and answers it."""
        raw_path = target.partition(b"?")[0]
        if method == "POST":
            return self.surface.handles(raw_path)
        return self.surface.proxied(raw_path)

    def serve(self, downstream: Downstream) -> Coroutine[Any, Any, None]:
        """The work of serving one request (the server runs it as the request's task)."""
        return ProxyRequest(self, downstream).run()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The same pipeline as an ASGI app, for ASGI servers other than our own."""
        downstream = AsgiDownstream(scope, receive, send)
        try:
            await self.serve(downstream)
        finally:
            downstream.close()


class ProxyRequest:
    """One proxied request; it alone starts and ends the request's accounting."""

    __slots__ = (
        "active", "core", "ds", "key", "proxy", "route", "started", "status", "trace",
        "upstream", "url",
    )  # fmt: skip

    def __init__(self, proxy: Proxy, ds: Downstream) -> None:
        self.proxy = proxy
        self.core = proxy.core
        self.ds = ds
        self.started = time.monotonic()
        self.key = ""
        """The model's key once resolved ("" before: errors are counted under it)."""
        self.active = False
        self.url: str | None = None
        """The endpoint whose load counts this request now."""
        self.status: int | None = None
        """What the client was answered (None: it left before an answer)."""
        self.route = NO_ROUTE
        """The proxied route, once the path is known to be one (a bounded label)."""
        self.trace: RequestTrace | None = None
        """The request's spans, when tracing is on."""
        self.upstream: Span | None = None
        """The span of the engine's part, open from the forward to the answer's end."""

    async def run(self) -> None:
        """Serve the request until its answer is sent or the client leaves."""
        bind_log_fields(self)
        try:
            await self._serve()
        except ClientGoneError:
            pass
        except asyncio.CancelledError:
            # Swallow only the cancellation the downstream made for a client that left.
            task = asyncio.current_task()
            if not self.ds.gone or task is None or task.uncancel() > 0:
                raise
        except FlexInferError as exc:
            await self._fail(exc)
        finally:
            self._end()

    def log_fields(self) -> dict[str, str]:
        """The model, the client's request ID (when well-formed) and the trace, for logs."""
        fields = {"model": self.key, "request_id": request_id(self.ds.header(REQUEST_ID))}
        if self.trace is not None:
            ctx = self.trace.span.get_span_context()
            fields["trace_id"] = format(ctx.trace_id, "032x")
            fields["span_id"] = format(ctx.span_id, "016x")
        return fields

    def _end(self) -> None:
        core = self.core
        if self.url is not None:
            core.loads.end(self.url)
            self.url = None
        if self.active:
            core.activity.end(self.key)
            self.active = False
        if self.trace is not None:
            self._end_upstream()
            self.trace.end(self.key, self.status)
        if self.status is not None:
            key = (self.key, self.route, self.status)
            core.metrics.requests.observe(key, time.monotonic() - self.started)

    async def _fail(self, exc: FlexInferError) -> None:
        status, headers, body = error_answer(exc)
        self.status = status
        log.debug("answering %d %s (model %s)", status, error_code(exc), self.key or "unknown")
        try:
            if self.ds.started:  # a progress stream: the error is its last event
                await self.ds.send(sse_error(status, str(exc), error_code(exc)))
                await self.ds.end()
            else:
                await self.ds.respond(status, headers, body)
        except ClientGoneError:
            self.status = None

    async def _serve(self) -> None:
        core, ds, surface = self.core, self.ds, self.proxy.surface
        target = parse_target(ds.target)
        if not surface.known(target.route):
            raise RouteNotFoundError(f"Invalid URL ({ds.method} {target.route}): no such route")
        self.route = target.route
        if core.tracer is not None:
            self.trace = RequestTrace(core.tracer, target.route, ds.header(TRACEPARENT))
        if ds.method != "POST":
            raise MethodNotAllowedError(f"Method {ds.method} is not allowed on {target.route}")
        grant = core.auth.authenticate(ds.header(b"authorization"))
        incoming = request_now(ds, target, core.settings) or await read_request(
            ds, target, core.settings
        )
        if self.trace is None:
            # A known name is a dict lookup; only a miss is checked and re-read.
            resolved = core.catalog.lookup_target(incoming.name) or await self._resolve(incoming)
        else:
            with self.trace.step("resolve model"):
                resolved = await self._resolve(incoming)
        self.key = resolved.key  # errors from here on are counted under the model
        model = resolved.model
        if not surface.allows(model.spec.backend, model.spec.is_external, target.route):
            raise RouteNotFoundError(
                f"Invalid URL (POST {target.route}): model '{incoming.name}' "
                f"(backend {model.spec.backend}) does not serve this route"
            )
        core.auth.authorize(grant, model)
        if core.limiter.enabled:
            self._rate_limit(resolved.key)
        hot = core.hot(resolved)
        core.activity.begin(self.key, hot.activity_interval_s)
        self.active = True
        answer = await self._forward(resolved, hot, incoming, target)
        self.status = answer.status
        core.metrics.ttfb.observe((self.key, self.route), time.monotonic() - self.started)
        try:
            if ds.started:
                await relay_as_event(answer, ds, incoming.stream, self._first_event)
            elif (body := answer.body_now()) is not None:  # the usual small answer: one write
                await ds.respond(answer.status, response_headers(answer), body)
            else:
                await relay_stream(answer, ds, self._first_event)
        finally:
            await answer.aclose()

    async def _resolve(self, incoming: IncomingRequest) -> Target:
        """The model the request names, from the catalog or, on a miss, the store."""
        resolved = self.core.catalog.lookup_target(incoming.name)
        if resolved is None:
            check_model_name(incoming.name, "model")
            resolved = await self.core.catalog.resolve_target(incoming.name)
        if resolved is None:
            raise ModelNotFoundError(incoming.name)
        return resolved

    def _end_upstream(self, error: str | None = None) -> None:
        if self.upstream is not None:
            if error is not None:
                self.upstream.set_status(Status(StatusCode.ERROR, error))
            self.upstream.end()
            self.upstream = None

    def _rate_limit(self, key: str) -> None:
        try:
            self.core.limiter.check(key)
        except RateLimitedError:
            self.core.metrics.rate_limited.labels(key).inc()
            raise

    def _first_event(self) -> None:
        """The first whole server-sent event of the answer went out: its time to first token."""
        self.core.metrics.ttft.observe((self.key,), time.monotonic() - self.started)

    async def _forward(
        self, resolved: Target, hot: HotModel, incoming: IncomingRequest, target: RequestTarget
    ) -> UpstreamAnswer:
        """The engine's answer, trying the model's other endpoints when one refuses."""
        core, key = self.core, resolved.key
        strategy = hot.strategy
        ctx = RouteContext(self.ds.headers, incoming.fields)
        headers = request_headers(self.ds, drop_authorization=core.auth.enabled)
        # External endpoints: nothing loads adapters into them, any of them may serve one.
        adapter = None if resolved.model.spec.is_external else resolved.adapter
        endpoint = None if adapter is not None else core.dispatcher.pick_now(key, strategy, ctx)
        while True:
            if endpoint is None:
                endpoint = await self._waited_endpoint(resolved, hot, ctx, incoming, adapter)
            incoming.rewrite(core.served_name(resolved, endpoint.url))
            sent = headers
            if self.trace is not None:
                self.upstream = self.trace.start_upstream(endpoint.url)
                sent = self.trace.upstream_headers(headers, self.upstream)
            request = UpstreamRequest(b"POST", target.forward, sent, incoming.body, incoming.length)
            self.url = url = endpoint.url
            core.loads.begin(url)
            try:
                return await self.proxy.transport.request(url, request)
            except ConnectFailedError as exc:
                core.loads.end(url)
                self.url = None
                self._end_upstream("connect failed")
                if isinstance(incoming.body, BodyStream) and incoming.body.started:
                    raise UpstreamError(str(exc)) from exc
                log.warning("%s: %s; trying another endpoint", key, exc)
                core.metrics.upstream_errors.labels(key, "connect").inc()
                core.dispatcher.endpoint_failed(key, url)
                endpoint = (
                    None if adapter is not None else core.dispatcher.pick_now(key, strategy, ctx)
                )
            except RequestFailedError as exc:
                core.metrics.upstream_errors.labels(key, "request").inc()
                self._end_upstream("request failed")
                raise UpstreamError(str(exc)) from exc

    async def _waited_endpoint(
        self,
        resolved: Target,
        hot: HotModel,
        ctx: RouteContext,
        incoming: IncomingRequest,
        adapter: LoRAAdapter | None,
    ) -> EndpointInfo:
        """An endpoint after waiting for one (timed, and traced as the queue wait)."""
        waiting = (
            self._adapter_endpoint(adapter, hot, ctx)
            if adapter is not None
            else self._wait_endpoint(resolved, hot, ctx, incoming)
        )
        if self.trace is None:
            endpoint = await waiting
        else:
            self.core.demand_trace(resolved.key, self.trace.demand_traceparent())
            with self.trace.step("queue wait"):
                endpoint = await waiting
        waited = time.monotonic() - self.started
        self.core.metrics.queue_wait.labels(resolved.key).observe(waited)
        return endpoint

    async def _wait_endpoint(
        self, resolved: Target, hot: HotModel, ctx: RouteContext, incoming: IncomingRequest
    ) -> EndpointInfo:
        """An endpoint once the model has one; fails at once if it never will."""
        core, key, strategy = self.core, resolved.key, hot.strategy
        label = resolved.model.metadata.name
        blocked = core.table.blocked(key)
        if blocked is not None:
            raise ModelUnavailableError(label, blocked, delay=core.settings.retry_after_s)
        if resolved.model.spec.is_external:
            # Nothing will start another endpoint: the request fails within the connect
            # timeout rather than waiting for one.
            raise UpstreamError(f"no endpoint of model {label} is reachable now")
        deadline = self.started + hot.wait_budget_s
        if not self._wants_progress(incoming):
            return await core.dispatcher.acquire(key, label, deadline, self.started, strategy, ctx)
        while True:
            ticket = core.queue.join(key, label)  # a full queue is a 503 before any byte
            try:
                if not self.ds.started:
                    await self.ds.start(200, SSE_HEADERS)
                await self._report_progress(key, label, deadline, ticket.future)
            finally:
                core.queue.leave(ticket)
            endpoint = core.table.pick(key, strategy, ctx)
            if endpoint is not None:
                waited = time.monotonic() - self.started
                await self.ds.send(
                    sse_comment(f"flexinfer cold-start phase=ready waited={waited:.0f}s")
                )
                return endpoint

    async def _adapter_endpoint(
        self, adapter: LoRAAdapter, hot: HotModel, ctx: RouteContext
    ) -> EndpointInfo:
        """An endpoint whose engine holds the LoRA adapter, waiting in the adapter's
        cold-start queue until one does; its demand names the adapter, so the controller
        starts the Model and loads the adapter."""
        core, name = self.core, adapter.spec.adapter_name
        key = adapter.model_key
        deadline = self.started + hot.wait_budget_s
        while True:
            # As the catalog has it now: no await between this look and joining the queue,
            # so a status that arrived since the last look is not missed.
            current = core.catalog.lookup_target(name)
            adapter = current.adapter if current is not None and current.adapter else adapter
            if adapter.status.phase is LoRAAdapterPhase.FAILED:
                why = adapter.status.message or "the controller could not load it"
                raise ModelUnavailableError(name, why, delay=core.settings.retry_after_s)
            endpoint = core.adapters.pick(adapter, hot.strategy, ctx)
            if endpoint is not None:
                return endpoint
            blocked = core.table.blocked(key)
            if blocked is not None:
                raise ModelUnavailableError(name, blocked, delay=core.settings.retry_after_s)
            demand = (key, name)
            await core.queue.wait(adapter_queue(adapter), name, deadline, self.started, demand)

    def _wants_progress(self, incoming: IncomingRequest) -> bool:
        if self.ds.started:
            return True
        if incoming.stream:
            return self.core.settings.progress_sse
        value = self.ds.header(PROGRESS_HEADER)
        return value is not None and value.strip().lower() in _TRUE

    async def _report_progress(
        self, key: str, label: str, deadline: float, released: asyncio.Future[None]
    ) -> None:
        """A progress comment now, on every phase change and every interval, until
        ``released`` resolves (or fails: the model cannot start) or the deadline passes."""
        core = self.core
        interval = core.settings.progress_interval_s
        while not released.done():
            now = time.monotonic()
            if now >= deadline:
                raise core.queue.timeout_error(label, self.started)
            await self.ds.send(sse_comment(core.progress.describe(key, now - self.started)))
            changed = core.progress.changed(key)
            await asyncio.wait(
                (released, changed),
                timeout=min(interval, deadline - now),
                return_when=asyncio.FIRST_COMPLETED,
            )
        released.result()
