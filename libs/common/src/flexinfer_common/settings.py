"""Settings groups shared by several services.

Each group is a small pydantic-settings object with its own ``FLEXINFER_<GROUP>_`` prefix;
a service's settings compose the groups it needs. Every field documents its unit and why
its default is what it is.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, BeforeValidator, Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict


def path_list(value: object) -> object:
    """Directories from the environment: a JSON list, or paths separated by ``:`` as in PATH."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    if text.startswith("["):
        return json.loads(text)
    return [part for part in text.split(os.pathsep) if part]


def _absolute(roots: list[Path]) -> list[Path]:
    for root in roots:
        if not root.is_absolute():
            raise ValueError(f"adapter root {str(root)!r} must be an absolute path")
        if any(ord(c) < 0x20 or ord(c) == 0x7F for c in str(root)):
            raise ValueError("adapter roots must not contain control characters")
    return roots


RootList = Annotated[list[Path], NoDecode, BeforeValidator(path_list), AfterValidator(_absolute)]
"""Absolute directories (LoRA adapter roots): a list, a JSON list, or ``/a:/b``."""


class BusSettings(BaseSettings):
    """The event bus (``FLEXINFER_BUS_*``)."""

    model_config = SettingsConfigDict(env_prefix="FLEXINFER_BUS_", extra="ignore")

    url: str = "memory://"
    """``memory://`` (one process, the embedded default: needs nothing installed) or
    ``redis://host:port/db`` (distributed mode: every service shares one Redis)."""

    stream_prefix: str = "flexinfer:"
    """Key prefix of the Redis streams, so several stacks can share one Redis."""

    retention: int = Field(default=10_000, ge=100)
    """Messages kept per topic (approximate MAXLEN): enough for minutes of bursts at
    fleet scale, small enough that Redis memory stays in the low megabytes."""

    reclaim_idle_s: float = Field(default=30.0, gt=0)
    """Seconds a message may stay unacked before another consumer reclaims it: longer than
    any handler takes, short enough that a crashed consumer's work resumes quickly."""


class StoreSettings(BaseSettings):
    """The SQL store (``FLEXINFER_STORE_*``)."""

    model_config = SettingsConfigDict(env_prefix="FLEXINFER_STORE_", extra="ignore")

    url: str = "sqlite:///flexinfer.db"
    """SQLAlchemy URL. SQLite (the embedded default) needs no server;
    ``postgresql+psycopg://user@host:5432/db`` is for distributed mode."""

    pool_size: int = Field(default=5, ge=1)
    """Connections per process (PostgreSQL only): services issue few, short queries."""

    echo: bool = False
    """Log every SQL statement (debugging only: it is very verbose)."""


class TelemetrySettings(BaseSettings):
    """Metrics and traces (``FLEXINFER_TELEMETRY_*``; OTEL_* variables are honoured too)."""

    model_config = SettingsConfigDict(env_prefix="FLEXINFER_TELEMETRY_", extra="ignore")

    metrics_enabled: bool = True
    """Serve Prometheus metrics on /metrics: cheap, and what Grafana dashboards read."""

    metrics_auth: bool = False
    """Require the service's admin token on /metrics (Prometheus sends it with
    ``authorization`` in its scrape config). Off by default: metrics carry no secrets and a
    cluster usually restricts who can scrape; turn it on where untrusted clients reach the
    port. A service with this on and no admin token refuses to start."""

    otel_enabled: bool = False
    """Export OpenTelemetry traces. Off by default, as in the operator
    (FLEXINFER_OTEL_ENABLED=false): exporting needs a collector to send to."""

    otel_endpoint: str | None = None
    """The OTLP/HTTP traces URL (``http://collector:4318/v1/traces``); when unset, the
    standard OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT applies (the
    latter with ``/v1/traces`` appended, as the OpenTelemetry specification says)."""

    service_namespace: str | None = None
    """service.namespace resource attribute on traces."""


class LogSettings(BaseSettings):
    """Logging (``FLEXINFER_LOG_*``)."""

    model_config = SettingsConfigDict(env_prefix="FLEXINFER_LOG_", extra="ignore")

    level: str = "INFO"
    """Root log level: INFO shows lifecycle events without per-request noise."""

    @field_validator("level")
    @classmethod
    def _known_level(cls, level: str) -> str:
        # Checked here, not when logging is configured: an unknown level is a settings error.
        names = [n for n in logging.getLevelNamesMapping() if n != "NOTSET"]
        if level.upper() not in names:
            raise ValueError(f"unknown log level {level!r}; use one of: {', '.join(names)}")
        return level.upper()

    json_format: bool = False
    """One JSON object per line, for log shippers; plain text reads better on a terminal."""
