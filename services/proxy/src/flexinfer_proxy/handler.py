"""The proxied OpenAI routes as a bare ASGI app: no per-request middleware or models.

POST /v1/* (and /model/<name>/v1/*): authenticate, read the body only as far as needed
to find the model, resolve it (names, aliases, service labels, LoRA adapters), apply the
rate limits, pick an endpoint with the model's routing strategy (waiting in the cold-start
queue if the model has none), forward, and stream the answer back. A client that
disconnects cancels whatever its request is doing.

Hooks on the hot path, in order: ``Authenticator.authenticate`` (only when tokens are
configured), ``extract_request`` (header/path checks; one JSON parse when the model comes
from a body within the parse cap), ``ModelCatalog.lookup_target`` (a dict lookup),
``Authenticator.authorize`` and ``RateLimiter.check`` (only when enabled),
``Router.for_model`` + ``EndpointTable.pick`` (round-robin for the default strategy),
``LoadTracker.begin/end``, and the body is re-encoded only when ``model`` must change.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine
from typing import Any

from starlette.types import Message, Receive, Scope, Send

from flexinfer_common.bus.topics import EndpointInfo
from flexinfer_common.errors import FlexInferError
from flexinfer_proxy.body_stream import (
    BodyStream,
    BodyTooLargeError,
    ClientGoneError,
)
from flexinfer_proxy.core.auth import TokenGrant
from flexinfer_proxy.core.catalog import Target
from flexinfer_proxy.core.errors import ModelNotFoundError
from flexinfer_proxy.core.routing.base import RouteContext
from flexinfer_proxy.core.service import ProxyCore
from flexinfer_proxy.error_answers import error_response, http_status_of
from flexinfer_proxy.extract_http import IncomingRequest, extract_request, header_value
from flexinfer_proxy.fast import FastPath
from flexinfer_proxy.forward import (
    UpstreamConnectError,
    UpstreamError,
    open_upstream,
    relay,
)
from flexinfer_proxy.hot_cache import HotCache
from flexinfer_proxy.progress_sse import serve_with_progress, wants_progress
from flexinfer_proxy.server_exchange import WATCH_DISCONNECT, Exchange, WatchDisconnect
from flexinfer_proxy.upstream import UpstreamPool, UpstreamResponse

log = logging.getLogger(__name__)

__all__ = ["BodyTooLargeError", "ClientGoneError", "OpenAIProxy"]


async def _watch_disconnect(receive: Receive, body_done: asyncio.Event | None) -> None:
    if body_done is not None:
        # The body is still streaming to the engine: receive() belongs to it until then.
        await body_done.wait()
    while (await receive())["type"] != "http.disconnect":
        pass


async def run_until_disconnect(
    receive: Receive,
    work: Coroutine[Any, Any, None],
    body_done: asyncio.Event | None = None,
    watch: WatchDisconnect | None = None,
) -> None:
    """Run ``work`` in this task; cancel it if the client disconnects first.

    The work runs inline (not in a task of its own). The proxy's own server tells of a
    disconnect through ``watch`` (a callback, no task at all); under any other ASGI server
    one watcher task reads ``receive`` and cancels the work.
    """
    task = asyncio.current_task()
    assert task is not None
    gone = False

    def disconnected() -> None:
        nonlocal gone
        if not gone:
            gone = True
            task.cancel()

    def watcher_done(watcher: asyncio.Future[None]) -> None:
        if not watcher.cancelled() and watcher.exception() is None:
            disconnected()

    watcher: asyncio.Future[None] | None = None
    if watch is not None:
        watch(disconnected)
    else:
        watcher = asyncio.ensure_future(_watch_disconnect(receive, body_done))
        watcher.add_done_callback(watcher_done)
    try:
        await work
    except asyncio.CancelledError:
        # Swallow only our own cancellation; one from outside (shutdown) propagates.
        if not gone or task.uncancel() > 0:
            raise
    else:
        if gone:
            task.uncancel()  # the work swallowed our cancellation and finished
    finally:
        if watcher is None:
            assert watch is not None
            watch(None)
        else:
            watcher.remove_done_callback(watcher_done)
            watcher.cancel()


class OpenAIProxy:
    """ASGI app for POST /v1/*: route to the model's engine, queueing on a cold start."""

    def __init__(self, core: ProxyCore, client: UpstreamPool | None = None) -> None:
        self.core = core
        self.client = client
        self.hot = HotCache(core)
        self.fast = FastPath(self)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Handle one request."""
        started = time.monotonic()
        core = self.core
        try:
            grant = core.auth.authenticate(header_value(scope, b"authorization"))
            request = await extract_request(scope, receive, core.settings)
            # A known name is a dict lookup; only a miss needs the (async) store re-read.
            catalog = core.catalog
            target = catalog.lookup_target(request.name) or await catalog.resolve_target(
                request.name
            )
            self.admit(grant, target, request)
        except ClientGoneError:
            return
        except FlexInferError as exc:
            self.core.metrics.requests.count("", http_status_of(exc))
            await error_response(exc)(scope, receive, send)
            return
        assert target is not None
        await self.serve_admitted(scope, receive, send, target, request, started)

    def admit(
        self, grant: TokenGrant | None, target: Target | None, request: IncomingRequest
    ) -> None:
        """Authorize and rate-limit a resolved request (``target`` None: no such model)."""
        core = self.core
        if target is None:
            raise ModelNotFoundError(request.name)
        core.auth.authorize(grant, target.model)
        if core.limiter.enabled:
            core.limiter.check(target.key)

    def serve_now(self, exchange: Exchange) -> bool:
        """Answer from the server's callbacks when that can be done (see ``fast.py``)."""
        return self.fast.serve(exchange)

    async def serve_admitted(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        target: Target,
        request: IncomingRequest,
        started: float,
        endpoint: EndpointInfo | None = None,
    ) -> None:
        """Route, forward and relay an admitted request, until done or the client leaves."""
        core = self.core
        key = target.key
        core.activity.begin(key, self.hot.timings(target.model)[0])
        body_done = request.body.done if isinstance(request.body, BodyStream) else None
        try:
            await run_until_disconnect(
                receive,
                self._serve(scope, receive, send, target, request, started, endpoint),
                body_done,
                scope.get("extensions", {}).get(WATCH_DISCONNECT),
            )
        except ClientGoneError:
            pass
        finally:
            core.activity.end(key)

    async def relay_admitted(
        self, scope: Scope, send: Send, key: str, response: UpstreamResponse, url: str
    ) -> None:
        """Relay an answer whose head arrived (handed over by the fast path).

        The fast path began the model's activity and the endpoint's load; both end here.
        """
        try:
            await run_until_disconnect(
                _never_receive,
                self._relay(key, response, url, send),
                None,
                scope["extensions"][WATCH_DISCONNECT],
            )
        finally:
            self.core.activity.end(key)

    async def _serve(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        target: Target,
        request: IncomingRequest,
        started: float,
        endpoint: EndpointInfo | None,
    ) -> None:
        core = self.core
        key = target.key
        request.rewrite(target.upstream_name)
        ctx = RouteContext(scope["headers"], request.fields)
        if endpoint is None:
            strategy = core.router.for_model(target.model)
            endpoint = core.dispatcher.pick_now(key, strategy, ctx)
        if endpoint is None and wants_progress(scope, request, core.settings):
            await serve_with_progress(self, scope, send, target, request, ctx, started)
            return
        try:
            response, url = await self.connect(scope, target, request, ctx, started, endpoint)
        except FlexInferError as exc:
            self.core.metrics.requests.count(key, http_status_of(exc))
            await error_response(exc)(scope, receive, send)
            return
        await self._relay(key, response, url, send)

    async def _relay(self, key: str, response: UpstreamResponse, url: str, send: Send) -> None:
        self.core.metrics.requests.count(key, response.status_code)
        try:
            await relay(response, send)
        finally:
            self.core.loads.end(url)

    async def connect(
        self,
        scope: Scope,
        target: Target,
        request: IncomingRequest,
        ctx: RouteContext,
        started: float,
        endpoint: EndpointInfo | None = None,
    ) -> tuple[UpstreamResponse, str]:
        """Open the upstream response, retrying other endpoints when connecting fails.

        The caller must call ``core.loads.end(url)`` once done with the response.
        """
        core = self.core
        model = target.model
        key = model.key
        strategy = core.router.for_model(model)
        assert self.client is not None, "the app's lifespan creates the client"
        deadline = started + self.hot.timings(model)[1]
        while True:
            if endpoint is None:
                endpoint = core.dispatcher.pick_now(key, strategy, ctx)
            if endpoint is None:
                endpoint = await core.dispatcher.acquire(
                    key, model.metadata.name, deadline, started, strategy, ctx
                )
                core.metrics.queue_wait.labels(key).observe(time.monotonic() - started)
            url = endpoint.url
            core.loads.begin(url)
            try:
                response = await open_upstream(
                    self.client, url, scope, request.body, request.forward_path, request.length
                )
            except UpstreamConnectError as exc:
                core.loads.end(url)
                if isinstance(request.body, BodyStream) and request.body.started:
                    raise UpstreamError(str(exc)) from exc
                log.warning("%s: %s; trying another endpoint", key, exc)
                core.metrics.upstream_errors.labels(key, "connect").inc()
                core.dispatcher.endpoint_failed(key, url)
                endpoint = None
                continue
            except BaseException:
                core.loads.end(url)
                raise
            return response, url


async def _never_receive() -> Message:
    raise AssertionError("the proxy's own server tells of disconnects by callback")
