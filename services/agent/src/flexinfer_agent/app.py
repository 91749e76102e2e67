"""The agent's HTTP app: health and metrics, with the heartbeat running in its lifespan."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from fastapi import FastAPI

from flexinfer_agent.core.discovery import Discovery, SourceRegistry
from flexinfer_agent.core.heartbeat import Heartbeat
from flexinfer_agent.metrics import AgentMetrics
from flexinfer_agent.reporting import open_reporter
from flexinfer_agent.settings import AgentSettings
from flexinfer_common.auth import install_admin_auth
from flexinfer_common.telemetry import setup_telemetry
from flexinfer_common.web import health_router, install_error_handlers


def create_app(settings: AgentSettings, *, sources: SourceRegistry | None = None) -> FastAPI:
    """The agent app: /healthz, /readyz and /metrics; heartbeats while it runs."""
    discovery = Discovery.from_settings(settings.discovery, sources)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with open_reporter(settings) as reporter:
            heartbeat = Heartbeat(
                node=settings.node_name,
                prefix=settings.labels.prefix,
                discovery=discovery,
                reporter=reporter,
                observer=app.state.metrics,
                interval_s=settings.heartbeat.interval_s,
            )
            app.state.heartbeat = heartbeat
            task = asyncio.create_task(heartbeat.run(), name="agent-heartbeat")
            try:
                yield
            finally:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)

    app = FastAPI(title="FlexInfer node agent", docs_url=None, redoc_url=None, lifespan=lifespan)
    app.state.settings = settings
    install_admin_auth(app, settings, host=settings.host, telemetry=settings.telemetry)
    install_error_handlers(app)
    app.include_router(health_router())
    app.state.telemetry = setup_telemetry(app, "agent", settings.telemetry)
    app.state.metrics = AgentMetrics(app.state.telemetry.registry)
    return app
