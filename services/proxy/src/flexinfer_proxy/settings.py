"""Proxy settings (``FLEXINFER_PROXY_*``; the operator's ``PROXY_*`` names are accepted too)."""

from __future__ import annotations

import os
import secrets
import socket
from datetime import timedelta
from typing import Annotated

from pydantic import AliasChoices, BeforeValidator, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from flexinfer_common.api import parse_duration
from flexinfer_common.settings import BusSettings, LogSettings, StoreSettings, TelemetrySettings


def _seconds(value: object) -> object:
    """Accept Go durations ("60s", "1m30s") as well as plain numbers of seconds."""
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return parse_duration(value).total_seconds()
    return value


Seconds = Annotated[float, BeforeValidator(_seconds)]
"""A duration in seconds; strings such as "60s" or "2m" are parsed as Go durations."""


def default_instance_id() -> str:
    """hostname-pid-random: unique per process, readable in logs and consumer groups."""
    host = socket.gethostname().split(".")[0] or "proxy"
    return f"{host}-{os.getpid()}-{secrets.token_hex(3)}"


class ProxySettings(BaseSettings):
    """The proxy service (``FLEXINFER_PROXY_*``)."""

    model_config = SettingsConfigDict(
        env_prefix="FLEXINFER_PROXY_", extra="ignore", populate_by_name=True
    )

    host: str = "127.0.0.1"
    """Listen address: loopback by default so a dev machine does not expose it."""

    port: int = Field(default=8080, ge=0, le=65535)
    """Listen port: 8080 as in the operator (0 picks a free port)."""

    namespace: str = Field(
        default="default",
        validation_alias=AliasChoices("namespace", "FLEXINFER_PROXY_NAMESPACE", "POD_NAMESPACE"),
    )
    """Namespace whose Models this proxy serves (the operator's POD_NAMESPACE)."""

    instance_id: str = Field(default_factory=default_instance_id, min_length=1, max_length=100)
    """This replica's id; its broadcast consumer group is ``proxy-<instance_id>``."""

    max_queue_size: int = Field(
        default=100,
        ge=0,
        validation_alias=AliasChoices(
            "max_queue_size", "FLEXINFER_PROXY_MAX_QUEUE_SIZE", "PROXY_MAX_QUEUE_SIZE"
        ),
    )
    """Requests that may wait per model for a cold start (operator default 100); more get
    503 queue_full so a burst cannot exhaust the proxy's memory."""

    queue_timeout: Seconds = Field(
        default=60.0,
        gt=0,
        validation_alias=AliasChoices(
            "queue_timeout", "FLEXINFER_PROXY_QUEUE_TIMEOUT", "PROXY_QUEUE_TIMEOUT"
        ),
    )
    """Seconds a request waits in the queue (operator default 60s)."""

    cold_start_timeout: Seconds = Field(
        default=60.0,
        gt=0,
        validation_alias=AliasChoices(
            "cold_start_timeout", "FLEXINFER_PROXY_COLD_START_TIMEOUT", "PROXY_COLD_START_TIMEOUT"
        ),
    )
    """Seconds to wait for a model to become ready; a request waits
    max(queue timeout, this, the model's spec.serverless.coldStartTimeout)."""

    max_body_bytes: int = Field(default=16 * 1024 * 1024, ge=1024)
    """Largest request body (16 MiB): long prompts fit, a hostile upload gets 413."""

    resync_interval_s: Seconds = Field(default=10.0, gt=0)
    """Seconds between full re-reads of models and endpoints from the store (as the
    operator's 10 s endpoint watch): repairs anything a lost bus event left stale."""

    demand_resend_interval_s: Seconds = Field(default=2.0, gt=0)
    """Seconds between repeats of a model's demand while requests wait: bus events can be
    lost and controllers restart, and 2 s is short next to a cold start."""

    activity_interval_s: Seconds = Field(default=60.0, gt=0)
    """Seconds between activity events per model (the operator's once-a-minute
    LastActiveTime update); never more than a third of the model's idleTimeout."""

    miss_refresh_interval_s: Seconds = Field(default=1.0, gt=0)
    """An unknown model name re-reads the store at most this often per name, so a new
    model is found at once but a hostile client cannot hammer the database."""

    endpoint_cooldown_s: Seconds = Field(default=5.0, gt=0)
    """Seconds an endpoint that refused a connection is skipped (unless a newer endpoint
    event arrives first)."""

    retry_after_s: int = Field(default=5, ge=1)
    """Retry-After (seconds) on 503 answers: long enough for a cold start to progress."""

    connect_timeout_s: Seconds = Field(default=5.0, gt=0)
    """Seconds to open a connection to an engine: local engines answer in milliseconds."""

    read_timeout_s: Seconds = Field(default=600.0, gt=0)
    """Seconds between two chunks from an engine: long generations stream slowly."""

    max_connections: int = Field(default=1000, ge=1)
    """Upstream connections in the pool; keep-alive ones are reused between requests."""

    max_keepalive_connections: int = Field(default=200, ge=0)
    """Idle upstream connections kept open for reuse."""

    bus: BusSettings = Field(default_factory=BusSettings)
    store: StoreSettings = Field(default_factory=StoreSettings)
    telemetry: TelemetrySettings = Field(default_factory=TelemetrySettings)
    log: LogSettings = Field(default_factory=LogSettings)
