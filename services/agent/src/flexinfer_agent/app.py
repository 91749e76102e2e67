"""The agent's HTTP app: today health and metrics only (node logic arrives in core/)."""

from __future__ import annotations

from fastapi import FastAPI

from flexinfer_agent.settings import AgentSettings
from flexinfer_common.auth import install_admin_auth
from flexinfer_common.telemetry import setup_telemetry
from flexinfer_common.web import health_router, install_error_handlers


def create_app(settings: AgentSettings) -> FastAPI:
    """The agent app: /healthz, /readyz and /metrics for one node."""
    app = FastAPI(title="FlexInfer node agent", docs_url=None, redoc_url=None)
    app.state.settings = settings
    install_admin_auth(app, settings, host=settings.host, telemetry=settings.telemetry)
    install_error_handlers(app)
    app.include_router(health_router())
    app.state.telemetry = setup_telemetry(app, "agent", settings.telemetry)
    return app
