"""Node agent settings (``FLEXINFER_AGENT_*``), in small groups with their own prefixes."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from flexinfer_common.auth import AdminAuthSettings
from flexinfer_common.settings import BusSettings, LogSettings, TelemetrySettings

DEFAULT_SOURCES = ["nvml", "nvidia-smi", "rocm-smi", "xpu-smi", "system-profiler", "drm"]
"""Discovery order: the vendor's library, then its tools, then what the kernel shows."""


class DiscoverySettings(BaseSettings):
    """How GPUs are found (``FLEXINFER_AGENT_DISCOVERY_*``)."""

    model_config = SettingsConfigDict(env_prefix="FLEXINFER_AGENT_DISCOVERY_", extra="ignore")

    sources: list[str] = Field(default_factory=lambda: list(DEFAULT_SOURCES), min_length=1)
    """Sources tried in order (a JSON list); the first that reports a GPU wins."""

    nvidia_smi: str = "nvidia-smi"
    """The ``nvidia-smi`` executable (a name looked up on PATH, or a path)."""

    rocm_smi: str = "rocm-smi"
    """The ``rocm-smi`` executable."""

    xpu_smi: str = "xpu-smi"
    """Intel's ``xpu-smi`` executable."""

    system_profiler: str = "system_profiler"
    """macOS's ``system_profiler`` executable."""

    drm_root: Path = Path("/sys/class/drm")
    """Where the kernel lists display/compute devices (the fallback source)."""

    nvml_module: str = "pynvml"
    """The module of the ``nvidia-ml-py`` package (optional; absent: NVML is skipped)."""

    timeout_s: float = Field(default=10.0, gt=0, le=120)
    """Seconds one tool may run: ``nvidia-smi`` takes seconds on a cold driver, and a hung
    driver must not stall the heartbeat for ever."""


class HeartbeatSettings(BaseSettings):
    """How often the node is re-discovered and reported (``FLEXINFER_AGENT_HEARTBEAT_*``)."""

    model_config = SettingsConfigDict(env_prefix="FLEXINFER_AGENT_HEARTBEAT_", extra="ignore")

    interval_s: float = Field(default=30.0, ge=1, le=3600)
    """Seconds between heartbeats (the seed agent's ``--interval 30s``): the free-memory
    annotation is at most this old, and a thousand nodes patch at most ~33 times a second
    (a patch is skipped when nothing changed)."""


class LabelSettings(BaseSettings):
    """The node keys the agent writes (``FLEXINFER_AGENT_LABELS_*``)."""

    model_config = SettingsConfigDict(env_prefix="FLEXINFER_AGENT_LABELS_", extra="ignore")

    prefix: str = Field(default="flexinfer.ai/", pattern=r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?$")
    """Prefix of every label and annotation (the seed agent's ``--label-prefix``)."""


class KubeSettings(BaseSettings):
    """How the agent reaches the apiserver (``FLEXINFER_AGENT_KUBE_*``)."""

    model_config = SettingsConfigDict(env_prefix="FLEXINFER_AGENT_KUBE_", extra="ignore")

    host: str | None = None
    """The apiserver's URL; unset: the pod's service account, else ``kubeconfig``."""

    kubeconfig: Path | None = None
    """A kubeconfig file outside a cluster (unset: $KUBECONFIG, then ~/.kube/config)."""


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

    report: Literal["auto", "kubernetes", "bus", "none"] = "auto"
    """Where each heartbeat goes: ``kubernetes`` patches this Node's labels, ``bus``
    publishes a ``NodeInventoryEvent`` for the local controller, ``none`` only updates
    /metrics; ``auto`` is ``kubernetes`` inside a cluster (KUBERNETES_SERVICE_HOST set or
    ``KUBE_HOST`` given) and ``bus`` elsewhere."""

    discovery: DiscoverySettings = Field(default_factory=DiscoverySettings)
    """GPU discovery (``FLEXINFER_AGENT_DISCOVERY_*``)."""

    heartbeat: HeartbeatSettings = Field(default_factory=HeartbeatSettings)
    """Heartbeats (``FLEXINFER_AGENT_HEARTBEAT_*``)."""

    labels: LabelSettings = Field(default_factory=LabelSettings)
    """Node labels (``FLEXINFER_AGENT_LABELS_*``)."""

    kube: KubeSettings = Field(default_factory=KubeSettings)
    """The apiserver (``FLEXINFER_AGENT_KUBE_*``)."""

    bus: BusSettings = Field(default_factory=BusSettings)
    """The event bus of local mode (``FLEXINFER_BUS_*``)."""

    telemetry: TelemetrySettings = Field(default_factory=TelemetrySettings)
    """Metrics and traces (``FLEXINFER_TELEMETRY_*``)."""

    log: LogSettings = Field(default_factory=LogSettings)
    """Logging (``FLEXINFER_LOG_*``)."""
