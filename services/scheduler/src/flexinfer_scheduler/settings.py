"""Scheduler settings (``FLEXINFER_SCHEDULER_*``)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from flexinfer_common.auth import AdminAuthSettings
from flexinfer_common.settings import LogSettings, TelemetrySettings


class SchedulerSettings(AdminAuthSettings):
    """The scheduler extender service (``FLEXINFER_SCHEDULER_*``)."""

    model_config = SettingsConfigDict(env_prefix="FLEXINFER_SCHEDULER_", extra="ignore")

    host: str = "127.0.0.1"
    """Listen address: loopback by default so a dev machine does not expose it; containers
    set ``0.0.0.0``."""

    port: int = Field(default=8888, ge=0, le=65535)
    """Listen port: 8888, the extender port FlexInfer's kube-scheduler config points at
    (0 picks a free port)."""

    telemetry: TelemetrySettings = Field(default_factory=TelemetrySettings)
    """Metrics and traces (``FLEXINFER_TELEMETRY_*``)."""

    log: LogSettings = Field(default_factory=LogSettings)
    """Logging (``FLEXINFER_LOG_*``)."""
