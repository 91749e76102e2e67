"""The store interface: Models (spec + status, optimistic concurrency) and endpoints.

The store plays the part the Kubernetes API server plays in the operator: the controller
writes, the proxy reads, and every write bumps ``metadata.resourceVersion`` so a writer
holding a stale copy gets ConflictError instead of overwriting newer data.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from datetime import datetime

from flexinfer_common.api import Model, ModelStatus


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


class ModelStore(ABC):
    """Persistent Models and endpoints. All methods raise StoreError when the DB fails."""

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
        """Replace metadata labels/annotations and spec; bumps generation when spec changed.

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
        """Delete the Model and its endpoints; NotFoundError if absent."""

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
