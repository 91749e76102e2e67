"""Registry settings (``FLEXINFER_REGISTRY_*``)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from flexinfer_common.settings import LogSettings, TelemetrySettings


class RegistrySettings(BaseSettings):
    """The model registry (``FLEXINFER_REGISTRY_*``): REST admin plus ModelExpress gRPC."""

    model_config = SettingsConfigDict(env_prefix="FLEXINFER_REGISTRY_", extra="ignore")

    host: str = "127.0.0.1"
    """HTTP listen address: loopback by default so a dev machine does not expose it;
    containers set ``0.0.0.0``."""

    port: int = Field(default=8011, ge=0, le=65535)
    """HTTP (health, metrics, admin REST) port: 8011, beside the gRPC port
    (0 picks a free port)."""

    grpc_host: str = "127.0.0.1"
    """gRPC listen address; loopback by default for the same reason as ``host``."""

    grpc_port: int = Field(default=8001, ge=0, le=65535)
    """gRPC port: 8001, the ModelExpress server's default, so ModelExpress clients need no
    flag (0 picks a free port; the bound address is ``app.state.grpc_address``)."""

    grpc_grace_s: float = Field(default=5.0, ge=0, le=300)
    """Seconds in-flight gRPC calls get to finish at shutdown: file streams are long, but a
    pod's termination grace period (30 s) must still cover the whole shutdown."""

    telemetry: TelemetrySettings = Field(default_factory=TelemetrySettings)
    """Metrics and traces (``FLEXINFER_TELEMETRY_*``)."""

    log: LogSettings = Field(default_factory=LogSettings)
    """Logging (``FLEXINFER_LOG_*``)."""
