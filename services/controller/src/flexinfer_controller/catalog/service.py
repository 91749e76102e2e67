"""Admin operations on ModelCatalogs: store writes, then a sync check of the key.

The status is the controller's: a created catalog starts with an empty one (whatever the
client sent), and a replace keeps what is stored. Every write queues the key, so a new
catalog or a changed spec syncs at once on the SQL store, where no informer reports it.
"""

from __future__ import annotations

from collections.abc import Callable

from flexinfer_common.api import ModelCatalog, ModelCatalogStatus
from flexinfer_common.errors import ConflictError, NotFoundError
from flexinfer_common.store import ModelStore

Changed = Callable[[str], object]
"""Called with a catalog's key after every write."""


class CatalogService:
    """What the admin API does with ModelCatalogs; knows nothing of HTTP."""

    def __init__(self, store: ModelStore, changed: Changed) -> None:
        self._store = store
        self._changed = changed

    async def create(self, catalog: ModelCatalog) -> ModelCatalog:
        """Insert a new ModelCatalog (empty status); ConflictError if it exists."""
        catalog.metadata.resource_version = None
        catalog.status = ModelCatalogStatus()
        stored = await self._store.create_catalog(catalog)
        self._changed(stored.key)
        return stored

    async def apply(self, catalog: ModelCatalog) -> tuple[ModelCatalog, bool]:
        """Create or replace; (stored catalog, created)."""
        meta = catalog.metadata
        for _ in range(3):
            try:
                await self._store.get_catalog(meta.namespace, meta.name)
            except NotFoundError:
                if meta.resource_version is not None:
                    raise ConflictError(
                        f"modelcatalog {catalog.key} does not exist, but resourceVersion "
                        f"{meta.resource_version!r} was given"
                    ) from None
                try:
                    return await self.create(catalog), True
                except ConflictError:
                    continue  # created concurrently: replace it instead
            stored = await self._store.replace_catalog(catalog)
            self._changed(stored.key)
            return stored, False
        raise ConflictError(f"modelcatalog {catalog.key} is being changed concurrently; retry")

    async def get(self, namespace: str, name: str) -> ModelCatalog:
        """The stored ModelCatalog, or NotFoundError."""
        return await self._store.get_catalog(namespace, name)

    async def list_namespace(self, namespace: str | None) -> list[ModelCatalog]:
        """ModelCatalogs of one namespace (all namespaces when None)."""
        return await self._store.list_catalogs(namespace)

    async def delete(self, namespace: str, name: str) -> None:
        """Delete the ModelCatalog (its syncs stop); NotFoundError if absent."""
        await self._store.delete_catalog(namespace, name)
        self._changed(f"{namespace}/{name}")
