"""The scheduler's HTTP app: today health and metrics only (placement arrives in core/)."""

from __future__ import annotations

from fastapi import FastAPI

from flexinfer_common.auth import install_admin_auth
from flexinfer_common.telemetry import setup_telemetry
from flexinfer_common.web import health_router, install_error_handlers
from flexinfer_scheduler.settings import SchedulerSettings


def create_app(settings: SchedulerSettings) -> FastAPI:
    """The scheduler app: /healthz, /readyz and /metrics."""
    app = FastAPI(title="FlexInfer scheduler", docs_url=None, redoc_url=None)
    app.state.settings = settings
    install_admin_auth(app, settings, host=settings.host, telemetry=settings.telemetry)
    install_error_handlers(app)
    app.include_router(health_router())
    app.state.telemetry = setup_telemetry(app, "scheduler", settings.telemetry)
    return app
