"""The legacy ModelCache kind (ai.flexinfer/v1alpha1): weights staged on nodes or a PVC.

Field names and defaults follow shared/reference/flexinfer-api.md §3.2. ``storageStrategy``
has no enum marker in the operator, so any string is stored; the known values are listed.
``flashLoader`` and ``quantization`` come from the operator's docs, not the Go type read.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import Field

from flexinfer_common.api.meta import ApiModel, Condition, ObjectMeta
from flexinfer_common.api.model import API_VERSION_V1ALPHA1, FlashLoaderSpec

CACHE_KIND: Literal["ModelCache"] = "ModelCache"
DEFAULT_HOST_PATH = "/var/lib/flexinfer/models"
STORAGE_STRATEGIES = ("Auto", "NodeLocal", "SharedPVC", "Ephemeral")
"""The strategies the operator knows (it declares no enum, so others are stored too)."""


class CacheQuantization(ApiModel):
    """spec.quantization: convert the weights while caching them."""

    format: Literal["GGUF", "AWQ", "GPTQ", "EXL2", "FP8"]


class ModelCacheSpec(ApiModel):
    """spec of a ModelCache: what to fetch and where to keep it."""

    source: str = Field(
        min_length=1,
        max_length=2048,
        description="huggingface://, mlc://, HF://, oci:// or oras://...@sha256: URI",
    )
    storage_strategy: str = Field(
        default="Auto", description="Auto, NodeLocal, SharedPVC or Ephemeral"
    )
    cluster_storage_class_name: str | None = None
    existing_claim_name: str | None = Field(
        default=None, description="reuse this PVC; the model goes in a subdirectory"
    )
    model_path: str | None = Field(default=None, description="defaults to the cache's name")
    storage_size: str = "50Gi"
    secret_ref: str | None = Field(default=None, description="a Secret with key HF_TOKEN")
    oci_registry_secret_ref: str | None = Field(default=None, description="dockerconfigjson")
    node_selector: dict[str, str] | None = Field(
        default=None, description="NodeLocal nodes; unset: nvidia.com/gpu.present=true"
    )
    host_path: str | None = Field(default=None, description=f"unset: {DEFAULT_HOST_PATH}")
    flash_loader: FlashLoaderSpec | None = None
    quantization: CacheQuantization | None = None


class ModelCachePhase(StrEnum):
    """Lifecycle phase of a ModelCache."""

    PENDING = "Pending"
    INITIALIZING = "Initializing"
    PROVISIONING = "Provisioning"
    READY = "Ready"
    FAILED = "Failed"


class ModelCacheStatus(ApiModel):
    """status of a ModelCache: where the weights are and on how many nodes."""

    phase: ModelCachePhase = ModelCachePhase.PENDING
    path: str | None = None
    size_bytes: str | None = Field(default=None, description="a string, as the operator writes it")
    ready_nodes: int = Field(default=0, ge=0)
    total_nodes: int = Field(default=0, ge=0)
    conditions: list[Condition] = Field(default_factory=list)


class ModelCache(ApiModel):
    """A ModelCache object: apiVersion, kind, metadata, spec and status."""

    api_version: Literal["ai.flexinfer/v1alpha1"] = API_VERSION_V1ALPHA1
    kind: Literal["ModelCache"] = CACHE_KIND
    metadata: ObjectMeta
    spec: ModelCacheSpec
    status: ModelCacheStatus = Field(default_factory=ModelCacheStatus)
