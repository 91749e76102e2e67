"""Proxy settings (``FLEXINFER_PROXY_*``; the operator's ``PROXY_*`` names are accepted too)."""

from __future__ import annotations

import os
import secrets
import socket
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AliasChoices, BeforeValidator, Field, SecretStr, field_validator
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

MIN_TOKEN_LENGTH = 8
MAX_TOKEN_LENGTH = 4096
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
    """Seconds to wait for a model to become ready; a request waits the model's
    spec.serverless.coldStartTimeout when it sets one, else max(queue timeout, this)."""

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
    """Idle upstream connections kept open for reuse, per engine."""

    upstream_keepalive_s: Seconds = Field(default=4.0, gt=0)
    """Seconds an idle upstream connection is kept for reuse, then closed: just under the
    5 s keep-alive of uvicorn-based engines (vLLM's and the reference engine's), so the
    proxy rarely writes a request into a connection the engine is closing."""

    server: Literal["flexinfer", "uvicorn"] = "flexinfer"
    """HTTP server protocol: the proxy's own lean HTTP/1.1 protocol (the default), or
    uvicorn's stock h11 protocol (kept as a reference: the proxy's tests run on both)."""

    upstream: Literal["h1", "httpx"] = "h1"
    """Upstream transport: the proxy's own pooled HTTP/1.1 client (the default, measured
    in bench/proxy.py), or httpx (the reference: the proxy's tests run on both)."""

    parse_cap_bytes: int = Field(default=1024 * 1024, ge=1024)
    """Bytes of a request body read before forwarding starts (1 MiB): enough for the
    ``model`` and routing fields of any sane request; the rest streams through unread."""

    body_timeout_s: Seconds = Field(default=30.0, gt=0)
    """Seconds a client may take to send the parsed part of its body, and the longest
    pause between later chunks: a slowloris client gets 408 instead of holding a slot."""

    auth_tokens: list[str] = Field(default_factory=list)
    """Bearer tokens accepted for every model (JSON list in the environment), at least
    8 characters each: a shorter one is guessed in minutes. With no tokens and no token
    file, auth is off (a dev proxy on loopback)."""

    @field_validator("auth_tokens")
    @classmethod
    def _tokens_are_long_enough(cls, tokens: list[str]) -> list[str]:
        for index, token in enumerate(tokens):
            if len(token) < MIN_TOKEN_LENGTH or len(token) > MAX_TOKEN_LENGTH:
                raise ValueError(
                    f"token #{index + 1} has {len(token)} characters; tokens must have "
                    f"{MIN_TOKEN_LENGTH} to {MAX_TOKEN_LENGTH}"
                )
            if not token.isprintable() or " " in token:
                raise ValueError(f"token #{index + 1} must be printable text without spaces")
        return tokens

    auth_token_file: Path | None = None
    """JSON file of scoped grants: [{"token", "name", "models": [...], "tenants": [...]}]."""

    admin_token: SecretStr | None = None
    """Admin bearer token (not a client token): with FLEXINFER_TELEMETRY_METRICS_AUTH on,
    /metrics needs it, as the other services' do (16 to 4096 printable characters)."""

    admin_token_file: Path | None = None
    """File of admin tokens, one per line (a mounted Secret), instead of ``admin_token``."""

    rate_limit_rps: float = Field(default=0.0, ge=0)
    """Global requests per second over all models (0 = unlimited)."""

    rate_limit_burst: float = Field(default=0.0, ge=0)
    """Global bucket size: requests allowed at once after a quiet spell (min 1)."""

    model_rate_limit_rps: float = Field(default=0.0, ge=0)
    """Requests per second per model (0 = unlimited)."""

    model_rate_limit_burst: float = Field(default=0.0, ge=0)
    """Per-model bucket size (min 1)."""

    routing_explicit_key_max_length: int = Field(
        default=128,
        ge=1,
        validation_alias=AliasChoices(
            "routing_explicit_key_max_length",
            "FLEXINFER_PROXY_ROUTING_EXPLICIT_KEY_MAX_LENGTH",
            "PROXY_ROUTING_EXPLICIT_KEY_MAX_LENGTH",
        ),
    )
    """Characters of an explicit session/cache key used (operator default 128)."""

    routing_system_segment_max_length: int = Field(
        default=512,
        ge=1,
        validation_alias=AliasChoices(
            "routing_system_segment_max_length",
            "FLEXINFER_PROXY_ROUTING_SYSTEM_SEGMENT_MAX_LENGTH",
            "PROXY_ROUTING_SYSTEM_SEGMENT_MAX_LENGTH",
        ),
    )
    """Characters of the system prompt in the prefix key (operator default 512)."""

    routing_document_segment_max_length: int = Field(
        default=256,
        ge=1,
        validation_alias=AliasChoices(
            "routing_document_segment_max_length",
            "FLEXINFER_PROXY_ROUTING_DOCUMENT_SEGMENT_MAX_LENGTH",
            "PROXY_ROUTING_DOCUMENT_SEGMENT_MAX_LENGTH",
        ),
    )
    """Characters of the first user message in the prefix key (operator default 256)."""

    prefix_index_size: int = Field(default=10_000, ge=1)
    """Prefix -> endpoint assignments remembered (LRU): bounded memory, warm caches."""

    backoff_enabled: bool = Field(
        default=False,
        validation_alias=AliasChoices(
            "backoff_enabled", "FLEXINFER_PROXY_BACKOFF_ENABLED", "PROXY_BACKOFF_ENABLED"
        ),
    )
    """Re-send a cold model's demand with exponential backoff and jitter instead of every
    demand_resend_interval_s (operator default off)."""

    backoff_max_retries: int = Field(
        default=3,
        ge=0,
        validation_alias=AliasChoices(
            "backoff_max_retries",
            "FLEXINFER_PROXY_BACKOFF_MAX_RETRIES",
            "PROXY_BACKOFF_MAX_RETRIES",
        ),
    )
    """Demand re-sends with backoff before waiting only for depth changes (default 3)."""

    backoff_initial_wait: Seconds = Field(
        default=5.0,
        gt=0,
        validation_alias=AliasChoices(
            "backoff_initial_wait",
            "FLEXINFER_PROXY_BACKOFF_INITIAL_WAIT",
            "PROXY_BACKOFF_INITIAL_WAIT",
        ),
    )
    """First backoff wait in seconds (operator default 5s); doubles per retry."""

    backoff_max_wait: Seconds = Field(
        default=30.0,
        gt=0,
        validation_alias=AliasChoices(
            "backoff_max_wait", "FLEXINFER_PROXY_BACKOFF_MAX_WAIT", "PROXY_BACKOFF_MAX_WAIT"
        ),
    )
    """Longest backoff wait in seconds (operator default 30s)."""

    queue_cleanup_interval_s: Seconds = Field(default=30.0, gt=0)
    """Seconds between sweeps removing queues empty for 2x the queue timeout (seed: 30s)."""

    progress_sse: bool = True
    """Send SSE comment lines with cold-start progress to streaming requests that wait."""

    progress_interval_s: Seconds = Field(default=2.0, gt=0)
    """Seconds between progress lines when the phase does not change (also a keep-alive)."""

    health_interval_s: Seconds = Field(default=10.0, gt=0)
    """Seconds between active health checks (GET /v1/models) of external endpoints."""

    queue_signals: Literal["bus", "kubernetes"] = "bus"
    """Where the proxy tells its queues: ``bus`` (DemandEvents only, the default: a local
    controller, or one on Kubernetes that reads the bus); ``kubernetes`` also writes them on
    the apiserver as the seed's proxy does (a GPUGroup's ``flexinfer.ai/queue.<model>``
    annotations, a v1alpha2 Model's ``status.lastActiveTime``), so a controller without
    the bus sees the demand too (docs/gpu-sharing.md)."""

    queue_signal_interval_s: Seconds = Field(default=1.0, gt=0)
    """Seconds between two apiserver writes of one Model's queue: a burst of requests is one
    write per second, not one per request, yet a GPUGroup's hysteresis (10 s) still sees it."""

    kubernetes_host: str | None = None
    """The apiserver's URL for ``queue_signals=kubernetes``; unset: the pod's service account
    (in a cluster), else $KUBECONFIG or ~/.kube/config."""

    bus: BusSettings = Field(default_factory=BusSettings)
    """The event bus (``FLEXINFER_BUS_*``): in memory embedded, Redis distributed."""
    store: StoreSettings = Field(default_factory=StoreSettings)
    """The SQL store (``FLEXINFER_STORE_*``): SQLite embedded, PostgreSQL distributed."""
    telemetry: TelemetrySettings = Field(default_factory=TelemetrySettings)
    """Metrics and traces (``FLEXINFER_TELEMETRY_*``)."""
    log: LogSettings = Field(default_factory=LogSettings)
    """Logging (``FLEXINFER_LOG_*``)."""
