"""Node agent settings (``FLEXINFER_AGENT_*``)."""

from __future__ import annotations

import socket

from pydantic import AliasChoices, Field
from pydantic_settings import SettingsConfigDict

from flexinfer_common.auth import AdminAuthSettings
from flexinfer_common.settings import LogSettings, TelemetrySettings


class AgentSettings(AdminAuthSettings):
    """The per-node agent (``FLEXINFER_AGENT_*``)."""

    model_config = SettingsConfigDict(
        env_prefix="FLEXINFER_AGENT_", extra="ignore", populate_by_name=True
    )

    host: str = "127.0.0.1"
    """Listen address of the metrics/health port: loopback by default; the DaemonSet sets
    ``0.0.0.0`` so Prometheus and the kubelet can reach it."""

    port: int = Field(default=9100, ge=0, le=65535)
    """Metrics/health port: 9100, the operator agent's ``--metrics-port`` default
    (0 picks a free port)."""

    node_name: str = Field(
        default_factory=socket.gethostname,
        validation_alias=AliasChoices("node_name", "FLEXINFER_AGENT_NODE_NAME", "NODE_NAME"),
        min_length=1,
        max_length=253,
    )
    """The node this agent reports for: the downward API's NODE_NAME in a DaemonSet, the
    hostname elsewhere."""

    telemetry: TelemetrySettings = Field(default_factory=TelemetrySettings)
    """Metrics and traces (``FLEXINFER_TELEMETRY_*``)."""

    log: LogSettings = Field(default_factory=LogSettings)
    """Logging (``FLEXINFER_LOG_*``)."""
