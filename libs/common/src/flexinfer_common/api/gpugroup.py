"""The legacy GPUGroup kind (ai.flexinfer/v1alpha1): ModelDeployments time-sharing one GPU.

Only the type lives here (shared/reference/flexinfer-api.md §3.3); swapping behaviour comes
with GPU sharing. Its v1alpha2 counterpart is a Model's ``spec.gpu.shared`` group.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Literal

from pydantic import Field

from flexinfer_common.api.meta import ApiModel, ObjectMeta
from flexinfer_common.api.model import API_VERSION_V1ALPHA1
from flexinfer_common.api.modeldeployment import INT32_MAX, AllocatedGPU

GPU_GROUP_KIND: Literal["GPUGroup"] = "GPUGroup"


class GPUGroupMember(ApiModel):
    """spec.models[]: one ModelDeployment of the group."""

    name: str = Field(min_length=1, description="a ModelDeployment")
    namespace: str | None = Field(default=None, description="unset: the group's namespace")
    priority: int = Field(default=100, ge=0, le=1000)
    vram_estimate_mb: int | None = Field(default=None, alias="vramEstimateMB")
    min_replicas: int | None = Field(default=None, ge=0, le=INT32_MAX)
    max_replicas: int | None = Field(default=None, ge=1, le=INT32_MAX)


class ScalingPolicy(ApiModel):
    """spec.scalingPolicy: how the group hands the GPU from one model to another."""

    strategy: Literal["Exclusive", "TimeSliced", "MemoryShared"] = Field(
        default="Exclusive", description="TimeSliced and MemoryShared are reserved"
    )
    preemption_policy: Literal["Immediate", "Graceful"] = "Graceful"
    drain_timeout_seconds: int = Field(default=60, ge=5, le=300)


class AntiThrashing(ApiModel):
    """spec.antiThrashing: limits on how often the group swaps."""

    enabled: bool = True
    minimum_run_duration_seconds: int = Field(default=30, ge=0, le=300)
    cooldown_after_preemption_seconds: int = Field(default=60, ge=0, le=600)
    request_queue_threshold: int = Field(default=3, ge=1, le=100)
    hysteresis_window_seconds: int = Field(default=10, ge=0, le=60, description="0 turns it off")


class GPUGroupSpec(ApiModel):
    """spec of a GPUGroup: its members and swap policy."""

    models: list[GPUGroupMember] = Field(min_length=1)
    node_selector: dict[str, str] | None = None
    scaling_policy: ScalingPolicy | None = None
    anti_thrashing: AntiThrashing | None = None
    auto_cache_models: bool = Field(
        default=False, description="create Memory-backed (/dev/shm) ModelCaches"
    )


class GroupPhase(StrEnum):
    """Lifecycle phase of a GPUGroup."""

    PENDING = "Pending"
    IDLE = "Idle"
    ACTIVE = "Active"
    DRAINING = "Draining"
    SWAPPING = "Swapping"
    FAILED = "Failed"


class PreemptionResult(ApiModel):
    """status.modelStatuses[].lastPreemptionResult: how the last drain went."""

    start_time: datetime | None = None
    end_time: datetime | None = None
    success: bool | None = None
    drain_duration_seconds: int | None = None
    timed_out: bool | None = None
    pods_terminated: int | None = None
    error: str | None = None


class QueueSample(ApiModel):
    """status.modelStatuses[].queueHistory[]: one queue-depth sample."""

    timestamp: datetime
    depth: int = Field(ge=0)


class MemberStatus(ApiModel):
    """status.modelStatuses[]: one member's state in the group."""

    name: str
    state: Literal["Active", "Preempted", "Queued", "Idle"] | None = None
    queued_requests: int | None = None
    queued_since: datetime | None = None
    last_active_time: datetime | None = None
    preempted_at: datetime | None = None
    preempted_by: str | None = None
    last_preemption_result: PreemptionResult | None = None
    queue_history: list[QueueSample] | None = None
    trend_direction: str | None = None
    trend_stability: int | None = Field(default=None, ge=0, le=100)


class GPUGroupStatus(ApiModel):
    """status of a GPUGroup: which member holds the GPU."""

    phase: GroupPhase = GroupPhase.PENDING
    active_model: str | None = None
    last_swap_reason: str | None = None
    allocated_gpu: AllocatedGPU | None = Field(default=None, alias="allocatedGPU")
    last_swap_time: datetime | None = None
    swap_count: int = Field(default=0, ge=0)
    model_statuses: list[MemberStatus] = Field(default_factory=list)


class GPUGroup(ApiModel):
    """A GPUGroup object: apiVersion, kind, metadata, spec and status."""

    api_version: Literal["ai.flexinfer/v1alpha1"] = API_VERSION_V1ALPHA1
    kind: Literal["GPUGroup"] = GPU_GROUP_KIND
    metadata: ObjectMeta
    spec: GPUGroupSpec
    status: GPUGroupStatus = Field(default_factory=GPUGroupStatus)
