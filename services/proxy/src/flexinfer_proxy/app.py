"""The proxy's app: the request pipeline for proxied routes, FastAPI for the rest."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from opentelemetry.sdk.trace.export import SpanExporter
from starlette.exceptions import HTTPException
from starlette.types import Receive, Scope, Send

from flexinfer_common.auth import guard_paths, load_admin_tokens
from flexinfer_common.bus import EventBus
from flexinfer_common.errors import ConfigError
from flexinfer_common.store import ModelStore
from flexinfer_common.telemetry import METRICS_PATH, setup_telemetry
from flexinfer_common.web import health_router, install_error_handlers, openai_error
from flexinfer_proxy.core.queue_mirror import QueueSink
from flexinfer_proxy.core.service import ProxyCore
from flexinfer_proxy.core.surface import default_surface
from flexinfer_proxy.openapi import document_proxied_routes
from flexinfer_proxy.pipeline import Proxy
from flexinfer_proxy.routes import models_router
from flexinfer_proxy.settings import ProxySettings
from flexinfer_proxy.sync import ProxySync
from flexinfer_proxy.transport.registry import create_transport
from flexinfer_proxy.transport.settings import TransportSettings


class ProxyApp(FastAPI):
    """FastAPI, except for the proxied routes: those go straight to the pipeline.

    FastAPI's middleware stack and router cost about a fifth of the proxy's CPU per
    request; the pipeline needs none of it, since it answers its own errors in OpenAI's
    shape. (The proxy's own server reaches ``pipeline`` before even this.)
    """

    pipeline: Proxy | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Dispatch one ASGI request."""
        pipeline = self.pipeline
        if pipeline is not None and scope["type"] == "http":
            raw = scope.get("raw_path") or scope["path"].encode()
            if pipeline.handles(scope["method"], raw):
                await pipeline(scope, receive, send)
                return
        await super().__call__(scope, receive, send)


def transport_settings(settings: ProxySettings) -> TransportSettings:
    """The upstream transport's slice of the proxy settings."""
    return TransportSettings(
        connect_timeout_s=settings.connect_timeout_s,
        read_timeout_s=settings.read_timeout_s,
        max_connections=settings.max_connections,
        max_idle=settings.max_keepalive_connections,
        keepalive_s=settings.upstream_keepalive_s,
    )


def guard_metrics(app: FastAPI, settings: ProxySettings) -> None:
    """With METRICS_AUTH on, /metrics needs the admin token (the proxy's other routes take
    client tokens); ConfigError when it is on and no admin token is set."""
    telemetry = settings.telemetry
    if not (telemetry.metrics_enabled and telemetry.metrics_auth):
        return
    tokens = load_admin_tokens(settings.admin_token, settings.admin_token_file)
    if tokens is None:
        raise ConfigError(
            "FLEXINFER_TELEMETRY_METRICS_AUTH is on but no admin token: set "
            "FLEXINFER_PROXY_ADMIN_TOKEN or FLEXINFER_PROXY_ADMIN_TOKEN_FILE"
        )
    guard_paths(app, tokens, lambda path: path == METRICS_PATH)


def _kube_queue_sink(settings: ProxySettings) -> QueueSink:
    from flexinfer_common.kube.client import KubeClient
    from flexinfer_proxy.adapters.kube_queue import ApiServerQueueSink

    return ApiServerQueueSink(KubeClient(settings.kubernetes_host), settings.resync_interval_s)


QUEUE_SINKS: Mapping[str, Callable[[ProxySettings], QueueSink | None]] = {
    "bus": lambda settings: None,
    "kubernetes": _kube_queue_sink,
}
"""``queue_signals`` -> where queues are written besides the bus."""


def create_app(
    settings: ProxySettings,
    *,
    bus: EventBus,
    store: ModelStore,
    span_exporter: SpanExporter | None = None,
) -> ProxyApp:
    """Build the proxy app; ``bus`` and ``store`` stay owned (and closed) by the caller.
    ``span_exporter`` replaces the OTLP exporter when tracing is on (tests)."""

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        sync = ProxySync(core)
        await sync.start()
        try:
            yield
        finally:
            await sync.stop()
            await core.aclose()
            await transport.aclose()
            if provider is not None:  # the last spans are exported before the process ends
                await asyncio.to_thread(provider.shutdown)

    app = ProxyApp(title="FlexInfer proxy", lifespan=lifespan, docs_url=None, redoc_url=None)
    guard_metrics(app, settings)
    # Requests are counted by the pipeline itself: no per-request middleware on the hot path.
    telemetry = setup_telemetry(
        app, "proxy", settings.telemetry, instrument_requests=False, span_exporter=span_exporter
    )
    provider = telemetry.tracer_provider
    tracer = provider.get_tracer("flexinfer.proxy") if provider is not None else None
    sink = QUEUE_SINKS[settings.queue_signals](settings)
    core = ProxyCore(
        settings,
        bus=bus,
        store=store,
        registry=telemetry.registry,
        queue_sink=sink,
        tracer=tracer,
    )
    transport = create_transport(settings.upstream, transport_settings(settings))
    app.pipeline = Proxy(core, transport, default_surface())
    document_proxied_routes(app, app.pipeline.surface)
    install_error_handlers(app)
    app.add_exception_handler(HTTPException, _http_error)

    async def ready() -> bool:
        # Without the bus a proxy misses endpoint changes and cannot demand a cold start.
        return core.catalog.loaded and await bus.healthy()

    app.include_router(health_router(ready))
    app.include_router(models_router(core))
    app.state.core = core
    app.state.telemetry = telemetry
    return app


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    """404, 405 and other routing answers in OpenAI's error shape (not FastAPI's)."""
    assert isinstance(exc, HTTPException)
    message = f"Invalid URL ({request.method} {request.url.path})"
    if exc.status_code == 405:
        message = f"Method {request.method} is not allowed on {request.url.path}"
    headers = dict(exc.headers) if exc.headers else None
    return openai_error(exc.status_code, message, code=_CODES.get(exc.status_code), headers=headers)


_CODES = {404: "not_found", 405: "method_not_allowed"}
