"""The legacy ModelDeployment kind (ai.flexinfer/v1alpha1), still served.

Field names, defaults and bounds follow shared/reference/flexinfer-api.md §3.1.
:mod:`flexinfer_common.api.conversion` turns one into a v1alpha2 Model and back.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Literal

from pydantic import Field, field_validator

from flexinfer_common.api.deployment_backends import FreeForm, MLCLLMSpec, VLLMSpec
from flexinfer_common.api.duration import Duration
from flexinfer_common.api.meta import ApiModel, Condition, ObjectMeta
from flexinfer_common.api.model import API_VERSION_V1ALPHA1, LiteLLMSpec

DEPLOYMENT_KIND: Literal["ModelDeployment"] = "ModelDeployment"
DEPLOYMENT_FINALIZER = "flexinfer.ai/cleanup"
"""The v1alpha1 controller's finalizer on a ModelDeployment."""

INT32_MAX = 2**31 - 1


class ResourceList(ApiModel):
    """corev1.ResourceRequirements as v1alpha1 writes it: GPUs are requested here too."""

    limits: dict[str, int | str] = Field(default_factory=dict)
    requests: dict[str, int | str] = Field(default_factory=dict)


class BenchmarkSpec(ApiModel):
    """spec.benchmark: how the benchmarker measures the deployment."""

    warmup_iterations: int = Field(default=2, le=INT32_MAX)
    min_duration: Duration | None = None
    batch_size: int = Field(default=128, ge=1, le=INT32_MAX)
    iterations: int = Field(default=5, ge=1, le=INT32_MAX)


class ModelDeploymentSpec(ApiModel):
    """spec of a ModelDeployment: one model, its backend, replicas and GPU wishes."""

    backend: str = Field(min_length=1, max_length=63)
    model: str = Field(min_length=1, max_length=2048, description="e.g. llama3:8b or an HF id")
    replicas: int = Field(default=1, ge=0, le=INT32_MAX)
    min_replicas: int = Field(default=0, ge=0, le=INT32_MAX)
    idle_timeout_seconds: int = Field(default=300, ge=0, le=INT32_MAX)
    cold_start_timeout_seconds: int = Field(default=60, ge=10, le=1800)
    resources: ResourceList | None = None
    benchmark: BenchmarkSpec | None = None
    model_cache_ref: str | None = Field(default=None, description="name of a ModelCache")
    litellm: LiteLLMSpec | None = None
    node_selector: dict[str, str] | None = None
    mlcllm: MLCLLMSpec | None = None
    vllm: VLLMSpec | None = None
    llamacpp: FreeForm | None = None
    comfyui: FreeForm | None = None
    vllm_omni: FreeForm | None = None
    gpu_group_ref: str | None = Field(default=None, description="name of a GPUGroup to join")
    priority: int = Field(default=100, ge=0, le=1000)
    vram_estimate_mb: int | None = Field(default=None, alias="vramEstimateMB")
    service_labels: list[str] | None = Field(default=None, max_length=10)

    @field_validator("model")
    @classmethod
    def _printable(cls, value: str) -> str:
        if any(ord(c) < 32 or ord(c) == 127 for c in value):
            raise ValueError("model must not contain control characters")
        return value


class DeploymentPhase(StrEnum):
    """Lifecycle phase of a ModelDeployment."""

    PENDING = "Pending"
    RUNNING = "Running"
    FAILED = "Failed"
    TERMINATING = "Terminating"


class AllocatedGPU(ApiModel):
    """status.allocatedGPU: the GPU a deployment (or a GPUGroup) holds."""

    node: str | None = None
    device: str | None = None
    type: str | None = None
    memory_mb: int | None = Field(default=None, alias="memoryMB")


class DeploymentEndpoints(ApiModel):
    """status.endpoints: where the deployment answers."""

    internal: str | None = None
    external: str | None = None


class DeploymentMetrics(ApiModel):
    """status.metrics: numbers as strings, as the operator writes them."""

    tokens_per_second: str | None = None
    avg_model_load_time: str | None = None
    avg_latency_ms: str | None = None
    error_rate: str | None = None


class ModelDeploymentStatus(ApiModel):
    """status of a ModelDeployment."""

    phase: DeploymentPhase = DeploymentPhase.PENDING
    conditions: list[Condition] = Field(default_factory=list)
    allocated_gpu: AllocatedGPU | None = Field(default=None, alias="allocatedGPU")
    endpoints: DeploymentEndpoints | None = None
    last_access_time: datetime | None = None
    metrics: DeploymentMetrics | None = None
    tokens_per_second: str | None = None


class ModelDeployment(ApiModel):
    """A ModelDeployment object: apiVersion, kind, metadata, spec and status."""

    api_version: Literal["ai.flexinfer/v1alpha1"] = API_VERSION_V1ALPHA1
    kind: Literal["ModelDeployment"] = DEPLOYMENT_KIND
    metadata: ObjectMeta
    spec: ModelDeploymentSpec
    status: ModelDeploymentStatus = Field(default_factory=ModelDeploymentStatus)
