"""``KubernetesModelStore``: the ModelStore on the Kubernetes API (Models, LoRAAdapters,
ModelCatalogs).

On Kubernetes the apiserver is the source of truth, as the SQL store is when embedded;
both implement flexinfer_common.store.ModelStore, so the reconcile core does not know
which one it has. Differences the interface allows, kept honest rather than papered over:

* resourceVersions are the apiserver's; a write that changes nothing keeps the old one
  (the SQL store bumps it on every write);
* a create ignores the status (status subresource): a non-default status is written
  right after, through the subresource;
* a delete of a Model that has finalizers (``flexinfer.ai/model-cleanup``) marks it with a
  deletionTimestamp; it disappears when the last finalizer is removed;
* endpoint records live in one ConfigMap per Model (see ``endpoints``), deleted with it.

Change notifications come from ``informer`` (list, then watch), not from the store.
"""

from __future__ import annotations

from collections.abc import Callable

from flexinfer_common.api import (
    LoRAAdapter,
    LoRAAdapterStatus,
    Model,
    ModelCatalog,
    ModelCatalogStatus,
    ModelStatus,
)
from flexinfer_common.kube.client import KubeClient, Obj
from flexinfer_common.kube.informer import Change, Informer
from flexinfer_common.store.base import EndpointRecord, ModelStore
from flexinfer_controller.adapters.kube.convert import from_object
from flexinfer_controller.adapters.kube.endpoints import ConfigMapEndpoints
from flexinfer_controller.adapters.kube.finalizers import add_finalizer, remove_finalizer
from flexinfer_controller.adapters.kube.kinds import KindStore
from flexinfer_controller.adapters.kube.objects import CustomListWatch, CustomObjects
from flexinfer_controller.adapters.kube.resources import (
    LORA_ADAPTERS,
    MODEL_CATALOGS,
    MODEL_FINALIZER,
    MODELS,
)
from flexinfer_controller.adapters.kube.shared import SharedInformers


class KubernetesModelStore(ModelStore):
    """Models and LoRAAdapters as custom resources, endpoints in ConfigMaps."""

    def __init__(self, client: KubeClient, informers: SharedInformers | None = None) -> None:
        self._client = client
        self.informers = informers or SharedInformers()
        """The informers every loop on this apiserver shares (one per kind and namespace)."""
        self._models = KindStore(CustomObjects(client, MODELS), Model, "model")
        self._adapters = KindStore(CustomObjects(client, LORA_ADAPTERS), LoRAAdapter, "loraadapter")
        self._catalogs = KindStore(
            CustomObjects(client, MODEL_CATALOGS), ModelCatalog, "modelcatalog"
        )
        self._endpoints = ConfigMapEndpoints(client)

    @classmethod
    def connect(
        cls,
        host: str | None = None,
        token: str | None = None,
        kubeconfig: str | None = None,
        watch_timeout_s: int = 300,
    ) -> KubernetesModelStore:
        """A store on ``host``, or in-cluster, or on a kubeconfig (ConfigError if none)."""
        return cls(KubeClient(host, token, kubeconfig), SharedInformers(watch_timeout_s))

    async def create_model(self, model: Model) -> Model:
        """Insert a new Model (generation 1); ConflictError if the key exists."""
        return await self._models.create(model)

    async def get_model(self, namespace: str, name: str) -> Model:
        """The Model, or NotFoundError."""
        return await self._models.get(namespace, name)

    async def list_models(self, namespace: str | None = None) -> list[Model]:
        """All Models, optionally of one namespace, ordered by key."""
        return await self._models.list(namespace)

    async def replace_model(self, model: Model) -> Model:
        """Replace labels/annotations and spec (generation bumps when the spec changed)."""
        return await self._models.replace(model)

    async def update_status(
        self, namespace: str, name: str, status: ModelStatus, resource_version: str | None = None
    ) -> Model:
        """Replace the status through the status subresource."""
        return await self._models.update_status(namespace, name, status, resource_version)

    async def delete_model(self, namespace: str, name: str) -> None:
        """Delete the Model and its endpoints; NotFoundError if absent."""
        await self._models.delete(namespace, name)
        await self._endpoints.drop_model(f"{namespace}/{name}")

    async def create_adapter(self, adapter: LoRAAdapter) -> LoRAAdapter:
        """Insert a new LoRAAdapter (generation 1); ConflictError if the key exists."""
        # The informer may write the pending status between the POST and this status
        # write: the same status, so it is no conflict (a later spec edit rewrites it).
        return await self._adapters.create(adapter, guard_status=False)

    async def get_adapter(self, namespace: str, name: str) -> LoRAAdapter:
        """The LoRAAdapter, or NotFoundError."""
        return await self._adapters.get(namespace, name)

    async def list_adapters(self, namespace: str | None = None) -> list[LoRAAdapter]:
        """All LoRAAdapters, optionally of one namespace, ordered by key."""
        return await self._adapters.list(namespace)

    async def replace_adapter(self, adapter: LoRAAdapter) -> LoRAAdapter:
        """Replace labels/annotations and spec; the resource_version rule of replace_model."""
        return await self._adapters.replace(adapter)

    async def update_adapter_status(
        self,
        namespace: str,
        name: str,
        status: LoRAAdapterStatus,
        resource_version: str | None = None,
    ) -> LoRAAdapter:
        """Replace the status through the status subresource."""
        return await self._adapters.update_status(namespace, name, status, resource_version)

    async def delete_adapter(self, namespace: str, name: str) -> None:
        """Delete the LoRAAdapter; NotFoundError if absent."""
        await self._adapters.delete(namespace, name)

    async def create_catalog(self, catalog: ModelCatalog) -> ModelCatalog:
        """Insert a new ModelCatalog (generation 1); ConflictError if the key exists."""
        return await self._catalogs.create(catalog)

    async def get_catalog(self, namespace: str, name: str) -> ModelCatalog:
        """The ModelCatalog, or NotFoundError."""
        return await self._catalogs.get(namespace, name)

    async def list_catalogs(self, namespace: str | None = None) -> list[ModelCatalog]:
        """All ModelCatalogs, optionally of one namespace, ordered by key."""
        return await self._catalogs.list(namespace)

    async def replace_catalog(self, catalog: ModelCatalog) -> ModelCatalog:
        """Replace labels/annotations and spec; the resource_version rule of replace_model."""
        return await self._catalogs.replace(catalog)

    async def update_catalog_status(
        self,
        namespace: str,
        name: str,
        status: ModelCatalogStatus,
        resource_version: str | None = None,
    ) -> ModelCatalog:
        """Replace the status through the status subresource."""
        return await self._catalogs.update_status(namespace, name, status, resource_version)

    async def delete_catalog(self, namespace: str, name: str) -> None:
        """Delete the ModelCatalog; NotFoundError if absent."""
        await self._catalogs.delete(namespace, name)

    async def put_endpoint(self, record: EndpointRecord) -> None:
        """Insert or replace the endpoint (model, replica)."""
        await self._endpoints.put(record)

    async def delete_endpoint(self, model: str, replica: str) -> None:
        """Remove the endpoint if present."""
        await self._endpoints.delete(model, replica)

    async def list_endpoints(self, model: str | None = None) -> list[EndpointRecord]:
        """Endpoints of one model, or of all models, ordered by (model, replica)."""
        return await self._endpoints.list(model)

    async def add_model_finalizer(
        self, namespace: str, name: str, finalizer: str = MODEL_FINALIZER
    ) -> Model:
        """The Model, holding ``finalizer`` (retried on conflicts)."""
        found = await add_finalizer(self._models.objects, namespace, name, finalizer)
        return from_object(Model, found)

    async def remove_model_finalizer(
        self, namespace: str, name: str, finalizer: str = MODEL_FINALIZER
    ) -> Model | None:
        """The Model without ``finalizer``; None when that let the apiserver delete it."""
        found = await remove_finalizer(self._models.objects, namespace, name, finalizer)
        return None if found is None else from_object(Model, found)

    def model_informer(
        self,
        on_change: Callable[[Change], None],
        namespace: str | None = None,
        watch_timeout_s: int = 300,
    ) -> Informer[Obj]:
        """An informer of Models (``run()`` it) calling ``on_change`` per change."""
        source = CustomListWatch(self._client, MODELS)
        return Informer(source, on_change, namespace=namespace, watch_timeout_s=watch_timeout_s)

    def adapter_informer(
        self, on_change: Callable[[Change], None], namespace: str | None = None
    ) -> Informer[Obj]:
        """An informer of LoRAAdapters."""
        return Informer(
            CustomListWatch(self._client, LORA_ADAPTERS), on_change, namespace=namespace
        )

    def catalog_informer(
        self, on_change: Callable[[Change], None], namespace: str | None = None
    ) -> Informer[Obj]:
        """An informer of ModelCatalogs."""
        return Informer(
            CustomListWatch(self._client, MODEL_CATALOGS), on_change, namespace=namespace
        )

    @property
    def client(self) -> KubeClient:
        """The connection pool (other readers of the same apiserver share it)."""
        return self._client

    async def close(self) -> None:
        """Close the connection pool."""
        await self._client.close()
