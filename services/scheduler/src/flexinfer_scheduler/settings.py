"""Scheduler settings (``FLEXINFER_SCHEDULER_*``)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from flexinfer_common.auth import AdminAuthSettings
from flexinfer_common.placement import PlacementWeights
from flexinfer_common.placement.tps import GLOBAL_RESULTS_CONFIGMAP
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

    weights: PlacementWeights = Field(default_factory=PlacementWeights)
    """The score's weights and tenant fair share (the seed's ``SCHED_*`` variables)."""

    kubernetes: bool = False
    """Keep Nodes (the node cache of ``nodeCacheCapable``), the benchmark ConfigMaps and,
    with fair share on, Pods in memory, each by an informer (list, then watch) of the
    apiserver (in-cluster config, else the kubeconfig); decisions read only memory. Off:
    nodes come only with each request."""

    sync_wait_s: float = Field(default=3.0, ge=0)
    """How long an extender request waits for the informers' first lists before it is
    answered with an error (an ExtenderFilterResult ``error``, a 503 for /prioritize):
    under the 5 s ``httpTimeout`` of k8s/scheduler, so kube-scheduler hears why."""

    kubernetes_host: str | None = None
    """The apiserver URL, bypassing in-cluster config and kubeconfig (tests, proxies)."""

    kubeconfig: str | None = None
    """A kubeconfig file, when not in a cluster and not ``$KUBECONFIG``."""

    benchmark_results_configmap: str = GLOBAL_RESULTS_CONFIGMAP
    """The global benchmark results ConfigMap, in each pod's namespace (the seed's
    ``BENCHMARK_RESULTS_CONFIGMAP``)."""

    max_body_bytes: int = Field(default=64 * 1024 * 1024, ge=1024)
    """The largest request body accepted (413 beyond): 64 MiB holds ExtenderArgs with
    5,000 full Node objects (without ``nodeCacheCapable``) with room to spare, while a
    hostile client cannot make the process buffer an unbounded body."""

    body_timeout_s: float = Field(default=10.0, gt=0)
    """How long a request body may take to arrive (408 beyond): twice kube-scheduler's
    5 s extender ``httpTimeout``, after which its caller has given up anyway, so a client
    trickling bytes cannot hold a request open."""

    extender_open: bool = False
    """Serve /filter, /prioritize and /score without the admin token. kube-scheduler's
    extender client cannot send a bearer token (only TLS client certificates), so a guarded
    scheduler needs this, with a NetworkPolicy admitting only kube-scheduler."""
