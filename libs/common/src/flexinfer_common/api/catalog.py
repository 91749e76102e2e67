"""The ModelCatalog kind (ai.flexinfer/v1alpha2): models discovered in registries.

Field names, defaults and enums follow shared/reference/flexinfer-api.md §2.2. A catalog
lists what registries (OCI, Hugging Face, Ollama) offer; it creates no Model.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from enum import StrEnum
from typing import Literal

from pydantic import Field, model_validator

from flexinfer_common.api.duration import Duration
from flexinfer_common.api.meta import ApiModel, Condition, ObjectMeta
from flexinfer_common.api.model import API_VERSION

CATALOG_KIND: Literal["ModelCatalog"] = "ModelCatalog"


class RegistryType(StrEnum):
    """The kind of registry a catalog reads."""

    OCI = "OCI"
    HUGGING_FACE = "HuggingFace"
    OLLAMA = "Ollama"


class RegistrySource(ApiModel):
    """spec.registries[]: one registry to list models from."""

    type: RegistryType
    url: str | None = Field(default=None, description="needed for OCI; ignored otherwise")
    secret_ref: str | None = Field(
        default=None,
        description="OCI: a dockerconfigjson Secret; HuggingFace: a Secret with key HF_TOKEN",
    )

    @model_validator(mode="after")
    def _oci_needs_url(self) -> RegistrySource:
        if self.type is RegistryType.OCI and not self.url:
            raise ValueError("an OCI registry needs url")
        return self


class CatalogFilter(ApiModel):
    """spec.filter: which of the registries' models the catalog keeps."""

    tags: list[str] | None = Field(default=None, description="a model must have all of these")
    name_pattern: str | None = Field(default=None, description="a glob on the model name")


class ModelCatalogSpec(ApiModel):
    """spec of a ModelCatalog: the registries to read and how often."""

    registries: list[RegistrySource] = Field(min_length=1)
    sync_interval: Duration = Field(default=timedelta(hours=1))
    filter: CatalogFilter | None = None


class CatalogEntry(ApiModel):
    """status.entries[]: one model a registry offers."""

    name: str
    registry: str
    reference: str
    size: int | None = Field(default=None, ge=0, description="bytes")


class ModelCatalogStatus(ApiModel):
    """status of a ModelCatalog: what the last sync found."""

    entries: list[CatalogEntry] = Field(default_factory=list)
    total_models: int = Field(default=0, ge=0)
    last_sync_time: datetime | None = None
    conditions: list[Condition] = Field(default_factory=list)


class ModelCatalog(ApiModel):
    """A ModelCatalog object: apiVersion, kind, metadata, spec and status."""

    api_version: Literal["ai.flexinfer/v1alpha2"] = API_VERSION
    kind: Literal["ModelCatalog"] = CATALOG_KIND
    metadata: ObjectMeta
    spec: ModelCatalogSpec
    status: ModelCatalogStatus = Field(default_factory=ModelCatalogStatus)

    @property
    def key(self) -> str:
        """``namespace/name``: the object's unique key."""
        return f"{self.metadata.namespace}/{self.metadata.name}"
