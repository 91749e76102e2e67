"""The ModelStore contract for ModelCatalogs (see ``store_contract`` for the calling convention)."""

from __future__ import annotations

from datetime import UTC, datetime

from flexinfer_common.api import Condition, ModelCatalog, ModelCatalogStatus
from flexinfer_common.api.catalog import CatalogEntry
from flexinfer_common.errors import ConflictError, NotFoundError
from flexinfer_common.testing.store_contract import Check, StoreFactory, Traits, raises


def make_catalog(name: str = "team", namespace: str = "default", **spec: object) -> ModelCatalog:
    """A ModelCatalog of one OCI registry."""
    body: dict[str, object] = {"registries": [{"type": "OCI", "url": "oci://r.example/models"}]}
    body.update(spec)
    return ModelCatalog.model_validate(
        {"metadata": {"name": name, "namespace": namespace, "labels": {"a": "b"}}, "spec": body}
    )


async def catalog_create_get_list(new_store: StoreFactory, traits: Traits) -> None:
    """Created catalogs read back with the spec's defaults and list by key, apart from Models."""
    store = new_store()
    created = await store.create_catalog(make_catalog("b"))
    meta = created.metadata
    assert (meta.generation, meta.namespace, meta.labels) == (1, "default", {"a": "b"})
    assert None not in (meta.uid, meta.resource_version, meta.creation_timestamp)
    assert created.spec.sync_interval.total_seconds() == 3600
    await store.create_catalog(make_catalog("a"))
    await store.create_catalog(make_catalog("a", namespace="ml"))
    assert await store.get_catalog("default", "b") == created
    assert [c.key for c in await store.list_catalogs()] == ["default/a", "default/b", "ml/a"]
    assert [c.key for c in await store.list_catalogs("ml")] == ["ml/a"]
    assert await store.list_models() == []
    assert await store.list_adapters() == []


async def catalog_conflicts_and_not_found(new_store: StoreFactory, traits: Traits) -> None:
    """Taken names conflict; absent catalogs are NotFoundError."""
    store = new_store()
    await store.create_catalog(make_catalog())
    with raises(ConflictError, match="modelcatalog default/team already exists"):
        await store.create_catalog(make_catalog())
    with raises(NotFoundError, match="modelcatalog default/nope not found"):
        await store.get_catalog("default", "nope")
    with raises(NotFoundError):
        await store.replace_catalog(make_catalog("nope"))
    with raises(NotFoundError):
        await store.update_catalog_status("default", "nope", ModelCatalogStatus())
    with raises(NotFoundError):
        await store.delete_catalog("default", "nope")


async def catalog_generation_bumps_on_spec_change(new_store: StoreFactory, traits: Traits) -> None:
    """Labels keep the generation; the spec bumps it; a stale resourceVersion conflicts."""
    store = new_store()
    first = await store.create_catalog(make_catalog())
    relabelled = first.model_copy(deep=True)
    relabelled.metadata.labels = {"x": "y"}
    second = await store.replace_catalog(relabelled)
    assert second.metadata.generation == 1
    changed = second.model_copy(deep=True)
    changed.spec.sync_interval = changed.spec.sync_interval * 2
    third = await store.replace_catalog(changed)
    assert third.metadata.generation == 2
    assert third.spec.sync_interval.total_seconds() == 7200
    with raises(ConflictError, match="is stale"):
        await store.replace_catalog(first)


async def catalog_status_keeps_spec(new_store: StoreFactory, traits: Traits) -> None:
    """A status write keeps spec and generation; a stale one conflicts."""
    store = new_store()
    first = await store.create_catalog(make_catalog())
    entry = CatalogEntry(name="m:v1", registry="oci://r", reference="oci://r/m:v1", size=7)
    status = ModelCatalogStatus(
        entries=[entry],
        total_models=1,
        last_sync_time=datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC),
        conditions=[Condition(type="Synced", status="True", reason="Synced", message="ok")],
    )
    rv = first.metadata.resource_version
    updated = await store.update_catalog_status("default", "team", status, rv)
    assert updated.status == status
    assert (updated.spec, updated.metadata.generation) == (first.spec, 1)
    assert (await store.get_catalog("default", "team")).status == status
    with raises(ConflictError):
        await store.update_catalog_status("default", "team", ModelCatalogStatus(), rv)


async def catalog_delete_and_recreate(new_store: StoreFactory, traits: Traits) -> None:
    """A deleted catalog is gone; a recreated one is a new object."""
    store = new_store()
    first = await store.create_catalog(make_catalog())
    await store.delete_catalog("default", "team")
    assert await store.list_catalogs() == []
    again = await store.create_catalog(make_catalog())
    assert again.metadata.uid != first.metadata.uid


CATALOG_STORE_CHECKS: list[Check] = [
    catalog_create_get_list,
    catalog_conflicts_and_not_found,
    catalog_generation_bumps_on_spec_change,
    catalog_status_keeps_spec,
    catalog_delete_and_recreate,
]
