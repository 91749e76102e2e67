"""status of a Model: what the controller observed."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import Field

from flexinfer_common.api.meta import ApiModel, Condition


class ModelPhase(StrEnum):
    """Lifecycle phase of a Model, as the FlexInfer operator reports it."""

    IDLE = "Idle"
    PENDING = "Pending"
    LOADING = "Loading"
    READY = "Ready"
    PREEMPTED = "Preempted"
    FAILED = "Failed"


class Residency(StrEnum):
    """Where a Model's weights are now (FlexInfer's own; ``flexinfer get models`` shows it)."""

    RESIDENT = "Resident"
    """An engine runs (starting or serving) and holds its GPU memory."""
    SLEEPING = "Sleeping"
    """Its engine sleeps: weights offloaded to host memory or dropped, GPU memory freed; a
    wake (not a cold start) brings it back."""
    STOPPED = "Stopped"
    """No engine runs."""


class ConditionType(StrEnum):
    """Condition types a Model carries."""

    CACHED = "Cached"
    LOADED = "Loaded"
    READY = "Ready"
    SCHEDULABLE = "Schedulable"
    CONFIG_VALID = "ConfigValid"
    RECONCILED = "Reconciled"
    """FlexInfer's own: present (False) only while reconciles fail, with the error."""


class GPUStatus(ApiModel):
    """status.gpu: where the model runs."""

    node: str | None = None
    device: str | None = None
    vendor: str | None = None
    architecture: str | None = None
    memory_mb: int | None = Field(default=None, alias="memoryMB")


class MetricsStatus(ApiModel):
    """status.metrics: numbers as strings, as the operator writes them."""

    tokens_per_second: str | None = None
    load_time_seconds: str | None = None
    avg_latency_ms: str | None = None


class SharedGroupStatus(ApiModel):
    """status.sharedGroup: this model's place in its GPU sharing group."""

    group_name: str | None = None
    state: str | None = None
    queue_position: int | None = None
    preempted_by: str | None = None
    preempted_at: datetime | None = None


class CacheStatus(ApiModel):
    """status.cache: whether the weights are cached and where."""

    strategy: str | None = None
    ready: bool = False
    pvc_name: str | None = None
    job_name: str | None = None
    job_phase: str | None = None
    message: str | None = None
    size_bytes: int | None = None
    quantization: dict[str, Any] | None = Field(
        default=None, description="the operator's QuantizationStatus, kept as written"
    )


class KVCacheStatus(ApiModel):
    """status.kvCache: KV-cache pressure and what the controller did about it (vLLM only)."""

    utilization: str | None = Field(default=None, description="ratio 0-1, as a string")
    pressure: bool | None = None
    last_pressure_time: datetime | None = None
    last_action: str | None = None
    reconfigured: bool | None = None
    reconfigured_at: datetime | None = None
    original_max_num_seqs: int | None = None
    reconfigured_max_num_seqs: int | None = None
    evicted: bool | None = None
    evicted_at: datetime | None = None


class AutoscalingStatus(ApiModel):
    """status.autoscaling: FlexInfer's own; why the replica count is what it is when the
    Model scales out by concurrency (maxReplicas above 1)."""

    target_concurrency: int | None = None
    """spec.serverless.targetConcurrency the decision used."""
    recommended_replicas: int | None = None
    """What the averaged concurrency alone asks for, before minReplicas/maxReplicas."""
    mode: str | None = None
    """``Stable`` (the stable window's average decides) or ``Panic`` (a burst: the short
    window's average decides, and nothing scales down until it has passed)."""
    reason: str | None = None
    """Why ``desiredReplicas`` is what it is: ``Stable``, ``ScaledUp``, ``ScaleDownDelayed``,
    ``AtMaxReplicas``, ``WaitingForGPU``, ``NoMetrics`` or ``Idle``."""
    message: str | None = None
    last_scale_time: datetime | None = None
    """When the concurrency decision last changed the desired count."""


class ModelStatus(ApiModel):
    """status of a Model.

    ``replicas`` and ``readyReplicas`` are FlexInfer additions (the operator's ModelStatus
    has neither): clients of the local runtime have no Deployment to read them from.
    """

    phase: ModelPhase = ModelPhase.PENDING
    conditions: list[Condition] = Field(default_factory=list)
    replicas: int = 0
    ready_replicas: int = 0
    desired_replicas: int = 0
    observed_generation: int | None = None
    gpu: GPUStatus | None = None
    endpoint: str | None = None
    last_active_time: datetime | None = None
    metrics: MetricsStatus | None = None
    shared_group: SharedGroupStatus | None = None
    residency: Residency | None = Field(
        default=None, description="FlexInfer's own: Resident, Sleeping or Stopped"
    )
    cache: CacheStatus | None = None
    kv_cache: KVCacheStatus | None = None
    autoscaling: AutoscalingStatus | None = None
    message: str | None = None


BLOCKING_REASONS = frozenset({"SourceNotFound", "RegistryNotConfigured"})
"""Condition reasons of a Pending model that will not change by waiting: the model stays
without a replica until its spec or its environment (a missing directory) changes."""


def blocked_reason(status: ModelStatus) -> str | None:
    """Why a model cannot get a ready replica until something changes, or None."""
    if status.phase is ModelPhase.FAILED:
        return status.message or "the controller marked the model Failed"
    if status.phase is ModelPhase.PENDING:
        for condition in status.conditions:
            if condition.status == "False" and condition.reason in BLOCKING_REASONS:
                return condition.message or condition.reason
    return None
