"""The registry's HTTP app; its lifespan also runs the gRPC server."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from flexinfer_common.telemetry import setup_telemetry
from flexinfer_common.web import health_router, install_error_handlers
from flexinfer_registry.core.info import ServerInfo
from flexinfer_registry.grpc_server import start_grpc_server
from flexinfer_registry.settings import RegistrySettings


def create_app(settings: RegistrySettings, *, info: ServerInfo | None = None) -> FastAPI:
    """The registry app: /healthz, /readyz, /metrics, and gRPC on grpc_host:grpc_port.

    Once started, ``app.state.grpc_address`` is the bound gRPC address ("host:port").
    """
    server_info = info or ServerInfo()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        grpc_server = await start_grpc_server(settings.grpc_host, settings.grpc_port, server_info)
        app.state.grpc_address = grpc_server.address
        try:
            yield
        finally:
            app.state.grpc_address = None
            await grpc_server.stop(settings.grpc_grace_s)

    app = FastAPI(title="FlexInfer registry", docs_url=None, redoc_url=None, lifespan=lifespan)
    app.state.settings = settings
    app.state.info = server_info
    app.state.grpc_address = None

    async def ready() -> bool:
        return app.state.grpc_address is not None

    install_error_handlers(app)
    app.include_router(health_router(ready))
    app.state.telemetry = setup_telemetry(app, "registry", settings.telemetry)
    return app
