"""The store interface: Models, LoRAAdapters, ModelCatalogs (spec + status), endpoints.

The store plays the part the Kubernetes API server plays in the operator: the controller
writes, the proxy reads, and every write bumps ``metadata.resourceVersion`` so a writer
holding a stale copy gets ConflictError instead of overwriting newer data.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from datetime import datetime

from flexinfer_common.api import (
    LoRAAdapter,
    LoRAAdapterStatus,
    Model,
    ModelCatalog,
    ModelCatalogStatus,
    ModelStatus,
)
from flexinfer_common.errors import NotFoundError, PermanentError
from flexinfer_common.placement.tps import benchmark_key


@dataclass(frozen=True, slots=True)
class EndpointRecord:
    """One replica of a model as the runtime started it."""

    model: str
    """namespace/name of the Model."""
    replica: str
    """Runtime-unique replica id (a process id for ``local``, a pod name for ``kubernetes``)."""
    url: str
    """Base URL of the replica's OpenAI-compatible server, without /v1."""
    ready: bool
    node: str | None
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class BenchmarkRecord:
    """A measured throughput: what the placement core's TPS lookup reads in local mode,
    as the global ``flexinfer-benchmark-results`` ConfigMap holds it on Kubernetes."""

    namespace: str
    backend: str
    """Canonical backend name."""
    model: str
    """The Model's name."""
    device_class: str
    """``flexinfer_common.placement.device_class`` of the node's labels."""
    tokens_per_second: float
    measured_at: datetime

    @property
    def key(self) -> str:
        """The table's key: ``benchmark_key(backend, model, device_class)``."""
        return benchmark_key(self.backend, self.model, self.device_class)


class ModelStore(ABC):
    """Persistent Models, LoRAAdapters and endpoints. Methods raise StoreError when the DB fails."""

    @abstractmethod
    async def create_model(self, model: Model) -> Model:
        """Insert a new Model (generation 1); ConflictError if the key exists."""

    @abstractmethod
    async def get_model(self, namespace: str, name: str) -> Model:
        """The Model, or NotFoundError."""

    @abstractmethod
    async def list_models(self, namespace: str | None = None) -> list[Model]:
        """All Models, optionally of one namespace, ordered by key."""

    @abstractmethod
    async def replace_model(self, model: Model) -> Model:
        """Replace metadata (labels, annotations, finalizers) and spec; bumps generation when
        spec changed. ``deletionTimestamp`` is kept as stored (``store.lifecycle``).

        ``model.metadata.resource_version``, when set, must match the stored one
        (ConflictError otherwise); when None the write is unconditional.
        """

    @abstractmethod
    async def update_status(
        self, namespace: str, name: str, status: ModelStatus, resource_version: str | None = None
    ) -> Model:
        """Replace the status only; the same resource_version rule as replace_model."""

    @abstractmethod
    async def delete_model(self, namespace: str, name: str) -> None:
        """Delete the Model and its endpoints; NotFoundError if absent.

        While ``metadata.finalizers`` hold it, only ``deletionTimestamp`` is stamped; the
        replace that removes the last finalizer then deletes it (``store.lifecycle``).
        """

    @abstractmethod
    async def put_endpoint(self, record: EndpointRecord) -> None:
        """Insert or replace the endpoint (model, replica)."""

    @abstractmethod
    async def delete_endpoint(self, model: str, replica: str) -> None:
        """Remove the endpoint if present."""

    @abstractmethod
    async def list_endpoints(self, model: str | None = None) -> list[EndpointRecord]:
        """Endpoints of one model, or of all models."""

    @abstractmethod
    async def close(self) -> None:
        """Dispose of connections."""

    async def open(self) -> None:
        """Make the store ready to serve (database, tables); StoreError when it cannot be.

        Services call it before they serve, so a wrong URL fails the start with one line.
        Other methods prepare the store on first use too: calling it is never required.
        """
        return  # a store with nothing to prepare (a static catalog) is ready as built

    # LoRAAdapters: the same resourceVersion/generation rules as Models. The defaults are a
    # store that holds none (a static, read-only catalog); the SQL store overrides them all.

    async def create_adapter(self, adapter: LoRAAdapter) -> LoRAAdapter:
        """Insert a new LoRAAdapter (generation 1); ConflictError if the key exists."""
        raise PermanentError(f"{type(self).__name__} does not keep LoRAAdapters")

    async def get_adapter(self, namespace: str, name: str) -> LoRAAdapter:
        """The LoRAAdapter, or NotFoundError."""
        raise NotFoundError(f"loraadapter {namespace}/{name} not found")

    async def list_adapters(self, namespace: str | None = None) -> list[LoRAAdapter]:
        """All LoRAAdapters, optionally of one namespace, ordered by key."""
        return []

    async def replace_adapter(self, adapter: LoRAAdapter) -> LoRAAdapter:
        """Replace labels/annotations and spec; the resource_version rule of replace_model."""
        raise PermanentError(f"{type(self).__name__} does not keep LoRAAdapters")

    async def update_adapter_status(
        self,
        namespace: str,
        name: str,
        status: LoRAAdapterStatus,
        resource_version: str | None = None,
    ) -> LoRAAdapter:
        """Replace the status only; the same resource_version rule as replace_adapter."""
        raise PermanentError(f"{type(self).__name__} does not keep LoRAAdapters")

    async def delete_adapter(self, namespace: str, name: str) -> None:
        """Delete the LoRAAdapter (finalizers hold it back, as Models); NotFoundError if absent."""
        raise NotFoundError(f"loraadapter {namespace}/{name} not found")

    # ModelCatalogs: the same rules again; a store that holds none (the proxy's static one)
    # keeps the defaults, the SQL and Kubernetes stores override them all.

    async def create_catalog(self, catalog: ModelCatalog) -> ModelCatalog:
        """Insert a new ModelCatalog (generation 1); ConflictError if the key exists."""
        raise PermanentError(f"{type(self).__name__} does not keep ModelCatalogs")

    async def get_catalog(self, namespace: str, name: str) -> ModelCatalog:
        """The ModelCatalog, or NotFoundError."""
        raise NotFoundError(f"modelcatalog {namespace}/{name} not found")

    async def list_catalogs(self, namespace: str | None = None) -> list[ModelCatalog]:
        """All ModelCatalogs, optionally of one namespace, ordered by key."""
        return []

    async def replace_catalog(self, catalog: ModelCatalog) -> ModelCatalog:
        """Replace labels/annotations and spec; the resource_version rule of replace_model."""
        raise PermanentError(f"{type(self).__name__} does not keep ModelCatalogs")

    async def update_catalog_status(
        self,
        namespace: str,
        name: str,
        status: ModelCatalogStatus,
        resource_version: str | None = None,
    ) -> ModelCatalog:
        """Replace the status only; the same resource_version rule as replace_catalog."""
        raise PermanentError(f"{type(self).__name__} does not keep ModelCatalogs")

    async def delete_catalog(self, namespace: str, name: str) -> None:
        """Delete the ModelCatalog; NotFoundError if absent."""
        raise NotFoundError(f"modelcatalog {namespace}/{name} not found")

    # Benchmark results (``flexinfer bench tps``): a store that keeps none answers an
    # empty table, so placement scores every device class with TPS 0.0.

    async def put_benchmark(self, record: BenchmarkRecord) -> None:
        """Insert or replace the result of (namespace, key)."""
        raise PermanentError(f"{type(self).__name__} does not keep benchmark results")

    async def list_benchmarks(self, namespace: str) -> list[BenchmarkRecord]:
        """The results of one namespace, ordered by key."""
        return []
