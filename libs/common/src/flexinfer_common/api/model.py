"""The Model kind (ai.flexinfer/v1alpha2): one declared model and its observed state.

Field names, defaults and enums follow the FlexInfer operator's API so that existing
manifests apply unchanged (see shared/reference/flexinfer-api.md §1).
"""

from __future__ import annotations

from datetime import timedelta
from enum import StrEnum
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from flexinfer_common.api.duration import Duration
from flexinfer_common.api.meta import ApiModel, Condition, ObjectMeta
from flexinfer_common.api.status import ModelStatus

API_GROUP = "ai.flexinfer"
API_VERSION: Literal["ai.flexinfer/v1alpha2"] = "ai.flexinfer/v1alpha2"
API_VERSION_V1ALPHA1: Literal["ai.flexinfer/v1alpha1"] = "ai.flexinfer/v1alpha1"
"""The legacy version: ModelDeployment, ModelCache and GPUGroup, still served."""
KIND: Literal["Model"] = "Model"
MODEL_FINALIZER = "flexinfer.ai/model-cleanup"
"""Added to a Model before anything is created for it; removed once that is cleaned up."""

GPU_VENDOR_NODE_LABEL = "node.flexstack.io/gpu-vendor"

GPU_RESOURCE_NAMES = ("nvidia.com/gpu", "amd.com/gpu", "gpu.intel.com/i915")


class GPUVendor(StrEnum):
    """Which accelerator vendor a model needs; ``auto`` detects it from node labels."""

    AUTO = "auto"
    NVIDIA = "nvidia"
    AMD = "amd"
    CPU = "cpu"


class GPUSpec(ApiModel):
    """spec.gpu: how many accelerators of which vendor, and GPU sharing."""

    vendor: GPUVendor = GPUVendor.AUTO
    shared: str | None = Field(default=None, description="GPU sharing group name")
    priority: int = Field(default=100, ge=0, le=1000)
    count: int | None = Field(default=None, ge=1, le=8)
    vram_estimate_mb: int | None = Field(default=None, ge=0, alias="vramEstimateMB")
    swap_cooldown: Duration | None = None

    @model_validator(mode="after")
    def _cpu_has_no_gpu_fields(self) -> GPUSpec:
        if self.vendor is GPUVendor.CPU and (
            self.count is not None or self.vram_estimate_mb is not None or self.shared
        ):
            raise ValueError("gpu.vendor=cpu must not set count, vramEstimateMB or shared")
        return self

    @property
    def effective_count(self) -> int:
        """GPUs per replica: 1 by default, 0 on the CPU."""
        if self.vendor is GPUVendor.CPU:
            return 0
        return self.count if self.count is not None else 1


DEFAULT_TARGET_CONCURRENCY = 16
"""In-flight requests per replica before the controller adds one. An engine batches the
requests it holds, so a replica serves a few dozen at once with per-token latency growing
slowly; 16 starts a second replica well before the engine's own queue (its waiting gauge)
grows, which is the latency a client feels. Knative's default soft target is 100, sized
for short HTTP requests; an LLM request holds its slot for seconds. With maxReplicas
defaulting to 1 it changes nothing until a manifest raises maxReplicas."""


class ServerlessSpec(ApiModel):
    """spec.serverless: scale to zero when idle, back up on the first request."""

    enabled: bool = True
    min_replicas: int = Field(default=0, ge=0, le=10)
    max_replicas: int = Field(default=1, ge=1, le=10)
    idle_timeout: Duration = Field(default=timedelta(seconds=300))
    cold_start_timeout: Duration | None = Field(
        default=None,
        description="how long a request waits for the model to become ready; honoured as "
        "given. Unset: the proxy's max(PROXY_QUEUE_TIMEOUT, PROXY_COLD_START_TIMEOUT), 60s",
    )
    scale_to_zero: bool = Field(
        default=True, description="false keeps at least one replica even when idle"
    )
    target_concurrency: int = Field(
        default=DEFAULT_TARGET_CONCURRENCY,
        ge=1,
        le=10000,
        description="in-flight requests (running or queued in the engine) per replica that "
        "the controller scales out for, between minReplicas and maxReplicas: replicas = "
        "ceil(average in-flight / targetConcurrency). A soft target, as Knative's "
        f"autoscaling target. Default {DEFAULT_TARGET_CONCURRENCY}",
    )

    @model_validator(mode="after")
    def _bounds(self) -> ServerlessSpec:
        if self.min_replicas > self.max_replicas:
            raise ValueError("serverless.minReplicas must not exceed maxReplicas")
        return self


class FlashLoaderSpec(ApiModel):
    """spec.cache.flashLoader: parallel preload of weights into tmpfs."""

    enabled: bool | None = None
    concurrency: int = Field(default=4, ge=1, le=32)
    tmpfs_size_limit: str | None = None
    buffer_size_kb: int = Field(default=4096, ge=32, le=16384, alias="bufferSizeKB")
    verify_integrity: bool | None = None
    image: str | None = None


class CompilationCacheSpec(ApiModel):
    """spec.cache.compilationCache: a node-local kernel compilation cache (ROCm)."""

    enabled: bool | None = None
    host_path: str = "/var/lib/flexinfer/compile-cache"
    size_limit: str = "2Gi"


class CacheSpec(ApiModel):
    """spec.cache: where weights are cached before an engine starts."""

    strategy: Literal["Memory", "SharedPVC", "Local", "None"] | None = None
    pvc_name: str | None = None
    storage_class: str = "longhorn"
    size: str = "50Gi"
    host_path: str = "/var/lib/flexinfer/models"
    compilation_cache: CompilationCacheSpec | None = None
    flash_loader: FlashLoaderSpec | None = None


class LiteLLMSpec(ApiModel):
    """spec.litellm: the names clients may use for this model."""

    enabled: bool = True
    served_model_name: str | None = None
    aliases: list[str] = Field(default_factory=list)
    copilot_alias: str | None = None


class KVCacheSpec(ApiModel):
    """spec.kvCache: KV-cache pressure handling (vLLM only)."""

    pressure_policy: Literal["Observe", "Reconfigure", "Evict"] = "Observe"
    high_watermark: float | str | None = None
    low_watermark: float | str | None = None
    max_block_size: int | None = None
    swap_space: int | str | None = None
    reconfigure_cooldown: Duration | None = None


class ModelCapabilities(ApiModel):
    """spec.capabilities: features inferred from the backend when unset."""

    tool_calling: bool | None = None
    vision: bool | None = None
    image_generation: bool | None = None


class ResourceRequirements(ApiModel):
    """corev1.ResourceRequirements (quantities as int or string)."""

    limits: dict[str, int | str] = Field(default_factory=dict)
    requests: dict[str, int | str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _no_gpu_resources(self) -> ResourceRequirements:
        for key in (*self.limits, *self.requests):
            if key in GPU_RESOURCE_NAMES:
                raise ValueError(f"resources must not name {key}; use spec.gpu.vendor/count")
        return self


class Toleration(ApiModel):
    """corev1.Toleration."""

    key: str | None = None
    operator: Literal["Exists", "Equal"] | None = None
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: int | None = None


class ModelSpec(ApiModel):
    """spec of a Model: what to serve, with which backend, on which hardware."""

    backend: str = Field(min_length=1, max_length=63)
    source: str = Field(min_length=1, max_length=2048)
    gpu: GPUSpec | None = None
    serverless: ServerlessSpec | None = None
    cache: CacheSpec | None = None
    config: dict[str, Any] | None = None
    resources: ResourceRequirements | None = None
    node_selector: dict[str, str] | None = None
    tolerations: list[Toleration] | None = None
    litellm: LiteLLMSpec | None = None
    service_labels: list[str] | None = Field(default=None, max_length=10)
    kv_cache: KVCacheSpec | None = None
    capabilities: ModelCapabilities | None = None
    quantize: dict[str, Any] | None = None
    endpoints: list[str] | None = Field(default=None, max_length=32)
    """External OpenAI-compatible base URLs (without /v1) serving this model: no runtime is
    started for it; the proxy routes to these URLs directly."""

    @field_validator("endpoints")
    @classmethod
    def _endpoints_are_http_urls(cls, value: list[str] | None) -> list[str] | None:
        for url in value or []:
            if not url.startswith(("http://", "https://")) or any(c.isspace() for c in url):
                raise ValueError(f"endpoint {url!r} must be an http:// or https:// base URL")
        return value

    @field_validator("source")
    @classmethod
    def _source_has_scheme(cls, value: str) -> str:
        if "://" not in value:
            raise ValueError("source must be a URI such as file:///path, HF://org/model")
        if "\x00" in value:
            raise ValueError("source must not contain NUL")
        return value

    @model_validator(mode="after")
    def _pvc_cache_strategy(self) -> ModelSpec:
        if self.source.startswith("pvc://") and self.cache and self.cache.strategy == "Memory":
            raise ValueError("a pvc:// source needs cache.strategy SharedPVC, Local or None")
        return self

    @model_validator(mode="after")
    def _node_selector_vendor(self) -> ModelSpec:
        # The operator's CEL rule: a pinned vendor label must agree with a pinned gpu.vendor.
        label = (self.node_selector or {}).get(GPU_VENDOR_NODE_LABEL)
        vendor = self.gpu.vendor if self.gpu else None
        if label is not None and vendor not in (None, GPUVendor.AUTO) and label != vendor:
            raise ValueError(
                f"nodeSelector[{GPU_VENDOR_NODE_LABEL!r}]={label!r} contradicts gpu.vendor={vendor}"
            )
        return self

    @property
    def serverless_or_default(self) -> ServerlessSpec:
        """spec.serverless with defaults filled in (serverless is on when omitted)."""
        return self.serverless or ServerlessSpec()

    @property
    def is_external(self) -> bool:
        """True when spec.endpoints names external servers: nothing is run for it."""
        return bool(self.endpoints)

    @property
    def gpu_or_default(self) -> GPUSpec:
        """spec.gpu with defaults; an omitted gpu means the CPU."""
        return self.gpu or GPUSpec(vendor=GPUVendor.CPU)


class Model(ApiModel):
    """A Model object: apiVersion, kind, metadata, spec and status."""

    api_version: Literal["ai.flexinfer/v1alpha2"] = API_VERSION
    kind: Literal["Model"] = KIND
    metadata: ObjectMeta
    spec: ModelSpec
    status: ModelStatus = Field(default_factory=ModelStatus)

    @property
    def key(self) -> str:
        """``namespace/name``: the object's unique key."""
        return f"{self.metadata.namespace}/{self.metadata.name}"

    @property
    def served_names(self) -> list[str]:
        """Every name a client may put in the request's ``model`` field."""
        spec = self.spec.litellm or LiteLLMSpec()
        names = [spec.served_model_name or self.metadata.name, *spec.aliases]
        if spec.copilot_alias:
            names.append(spec.copilot_alias)
        return list(dict.fromkeys(names))


__all__ = ["Condition", "Model", "ModelSpec", "ModelStatus", "ObjectMeta"]
