"""The LoRAAdapter kind (ai.flexinfer/v1alpha2): a LoRA adapter served on a base Model.

Field names and enums follow the FlexInfer operator's API (shared/reference/flexinfer-api.md
§2.1) so that existing manifests apply unchanged. Clients put ``spec.adapterName`` in the
request's ``model`` field; the proxy routes it to ``spec.modelRef`` (a Model of the same
namespace) and forwards the adapter name, which is how vLLM selects an adapter.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import Field, field_validator

from flexinfer_common.api.meta import ApiModel, Condition, ObjectMeta
from flexinfer_common.api.model import API_VERSION

LORA_KIND: Literal["LoRAAdapter"] = "LoRAAdapter"
LORA_FINALIZER = "flexinfer.ai/lora-cleanup"

# The Go regexp dialect the API server uses has no lookaheads, so the CRD carries only this
# pattern; the remaining served-name rules are checked by the validator below.
DNS_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"


def check_served_name(value: str) -> str:
    """``value`` if it is usable as a served model name (the request's ``model`` field)."""
    if any(ord(c) < 32 or ord(c) == 127 or c.isspace() for c in value):
        raise ValueError("must not contain whitespace or control characters")
    if ".." in value:
        raise ValueError("must not contain '..'")
    if value.startswith("/"):
        raise ValueError("must not start with '/'")
    return value


class LoRASourceType(StrEnum):
    """Where an adapter's weights come from."""

    HUGGING_FACE = "HuggingFace"
    OCI = "OCI"
    LOCAL_PATH = "LocalPath"


class LoRASource(ApiModel):
    """spec.source: the adapter's weights (org/adapter, registry/x:tag or a local path)."""

    type: LoRASourceType
    uri: str = Field(min_length=1, max_length=2048)

    @field_validator("uri")
    @classmethod
    def _printable(cls, value: str) -> str:
        if any(ord(c) < 32 or ord(c) == 127 for c in value):
            raise ValueError("source.uri must not contain control characters")
        return value


class LoRAAdapterSpec(ApiModel):
    """spec of a LoRAAdapter: which base Model, which name clients use, which weights."""

    model_ref: str = Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN_PATTERN)
    """Name of the base Model, in the adapter's namespace."""
    adapter_name: str = Field(min_length=1, max_length=256)
    """The name clients put in the request's ``model`` field."""
    source: LoRASource
    max_rank: int | None = Field(default=None, ge=1, le=1024)
    preload: bool = Field(
        default=False, description="load when the model starts instead of on first request"
    )

    @field_validator("adapter_name")
    @classmethod
    def _served_name(cls, value: str) -> str:
        return check_served_name(value)


class LoRAAdapterPhase(StrEnum):
    """Lifecycle phase of a LoRAAdapter, as the FlexInfer operator reports it."""

    PENDING = "Pending"
    CACHING = "Caching"
    LOADED = "Loaded"
    UNLOADING = "Unloading"
    FAILED = "Failed"


class LoRAAdapterStatus(ApiModel):
    """status of a LoRAAdapter: where it is loaded."""

    phase: LoRAAdapterPhase = LoRAAdapterPhase.PENDING
    conditions: list[Condition] = Field(default_factory=list)
    loaded_replicas: int = Field(default=0, ge=0)
    total_replicas: int = Field(default=0, ge=0)
    message: str | None = Field(default=None, max_length=32768)


class LoRAAdapter(ApiModel):
    """A LoRAAdapter object: apiVersion, kind, metadata, spec and status."""

    api_version: Literal["ai.flexinfer/v1alpha2"] = API_VERSION
    kind: Literal["LoRAAdapter"] = LORA_KIND
    metadata: ObjectMeta
    spec: LoRAAdapterSpec
    status: LoRAAdapterStatus = Field(default_factory=LoRAAdapterStatus)

    @property
    def key(self) -> str:
        """``namespace/name``: the object's unique key."""
        return f"{self.metadata.namespace}/{self.metadata.name}"

    @property
    def model_key(self) -> str:
        """``namespace/modelRef``: the key of the base Model."""
        return f"{self.metadata.namespace}/{self.spec.model_ref}"
