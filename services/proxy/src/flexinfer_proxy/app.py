"""The proxy's FastAPI app: OpenAI routes, health, metrics, and the background sync."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from starlette.routing import Route

from flexinfer_common.bus import EventBus
from flexinfer_common.store import ModelStore
from flexinfer_common.telemetry import setup_telemetry
from flexinfer_common.web import health_router, install_error_handlers
from flexinfer_proxy.core.service import ProxyCore
from flexinfer_proxy.fastpath import ProxyApp
from flexinfer_proxy.forward import create_client
from flexinfer_proxy.handler import OpenAIProxy
from flexinfer_proxy.routes import models_router
from flexinfer_proxy.settings import ProxySettings
from flexinfer_proxy.sync import ProxySync


def create_app(settings: ProxySettings, *, bus: EventBus, store: ModelStore) -> FastAPI:
    """Build the proxy app; ``bus`` and ``store`` stay owned (and closed) by the caller."""
    holder: dict[str, ProxyCore] = {}

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        core = holder["core"]
        async with create_client(settings) as client:
            proxy.client = client
            sync = ProxySync(core)
            await sync.start()
            try:
                yield
            finally:
                await sync.stop()
                await core.aclose()
                proxy.client = None

    app = ProxyApp(title="FlexInfer proxy", lifespan=lifespan, docs_url=None, redoc_url=None)
    # Requests are counted by the proxy itself: no per-request middleware on the hot path.
    telemetry = setup_telemetry(app, "proxy", settings.telemetry, instrument_requests=False)
    core = ProxyCore(settings, bus=bus, store=store, registry=telemetry.registry)
    holder["core"] = core
    proxy = OpenAIProxy(core)
    install_error_handlers(app)

    async def ready() -> bool:
        return core.catalog.loaded and proxy.client is not None

    app.include_router(health_router(ready))
    app.include_router(models_router(core))
    # A bare ASGI endpoint: Starlette calls it directly, without Request/Response wrapping.
    app.router.routes.append(
        Route("/v1/{path:path}", proxy, methods=["POST"], include_in_schema=False)
    )
    # /model/<name>/v1/...: the model named in the path, which is stripped when forwarding.
    app.router.routes.append(
        Route("/model/{path:path}", proxy, methods=["POST"], include_in_schema=False)
    )
    app.state.core = core
    # The hot path: proxied POSTs skip FastAPI's middleware and router (the routes above
    # stay for the OpenAPI-less app's completeness and for anything that bypasses ProxyApp).
    app.proxy = proxy
    return app
