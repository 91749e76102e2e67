"""The ModelStore contract for LoRAAdapters (see ``store_contract`` for the calling convention)."""

from __future__ import annotations

from flexinfer_common.api import Condition, LoRAAdapterPhase, LoRAAdapterStatus, Model
from flexinfer_common.errors import ConflictError, NotFoundError
from flexinfer_common.testing.store_contract import (
    Check,
    StoreFactory,
    Traits,
    make_adapter,
    raises,
)


async def create_get_list(new_store: StoreFactory, traits: Traits) -> None:
    """Created adapters read back and list by key, apart from Models."""
    store = new_store()
    created = await store.create_adapter(make_adapter("b"))
    meta = created.metadata
    assert (meta.generation, meta.namespace, meta.labels) == (1, "default", {"a": "b"})
    assert None not in (meta.uid, meta.resource_version, meta.creation_timestamp)
    assert created.status.phase is LoRAAdapterPhase.PENDING
    await store.create_adapter(make_adapter("a"))
    await store.create_adapter(make_adapter("a", namespace="ml"))
    assert await store.get_adapter("default", "b") == created
    assert [a.key for a in await store.list_adapters()] == ["default/a", "default/b", "ml/a"]
    assert [a.key for a in await store.list_adapters("ml")] == ["ml/a"]
    assert await store.list_models() == []  # adapters are not Models


async def conflicts_and_not_found(new_store: StoreFactory, traits: Traits) -> None:
    """Taken names conflict; absent adapters are NotFoundError."""
    store = new_store()
    await store.create_adapter(make_adapter())
    with raises(ConflictError, match="loraadapter default/sql already exists"):
        await store.create_adapter(make_adapter())
    with raises(NotFoundError, match="loraadapter default/nope not found"):
        await store.get_adapter("default", "nope")
    with raises(NotFoundError):
        await store.replace_adapter(make_adapter("nope"))
    with raises(NotFoundError):
        await store.delete_adapter("default", "nope")


async def generation_bumps_on_spec_change(new_store: StoreFactory, traits: Traits) -> None:
    """Labels keep the generation; the spec bumps it."""
    store = new_store()
    first = await store.create_adapter(make_adapter())
    relabelled = first.model_copy(deep=True)
    relabelled.metadata.labels = {"x": "y"}
    second = await store.replace_adapter(relabelled)
    assert second.metadata.generation == 1
    assert second.metadata.labels == {"x": "y"}
    assert int(second.metadata.resource_version or 0) > int(first.metadata.resource_version or 0)
    changed = second.model_copy(deep=True)
    changed.spec.max_rank = 32
    third = await store.replace_adapter(changed)
    assert (third.metadata.generation, third.spec.max_rank) == (2, 32)
    assert third.metadata.uid == first.metadata.uid


async def stale_resource_version_conflicts(new_store: StoreFactory, traits: Traits) -> None:
    """Stale and never-issued resourceVersions conflict."""
    store = new_store()
    first = await store.create_adapter(make_adapter())
    relabelled = first.model_copy(deep=True)
    relabelled.metadata.labels = {"changed": "yes"}
    await store.replace_adapter(relabelled)  # first's resourceVersion is now stale
    with raises(ConflictError, match="is stale"):
        await store.replace_adapter(first)
    bogus = first.model_copy(deep=True)
    bogus.metadata.resource_version = "abc"
    with raises(ConflictError, match="not one we issued"):
        await store.replace_adapter(bogus)
    status = LoRAAdapterStatus(phase=LoRAAdapterPhase.FAILED, message="x")
    with raises(ConflictError):
        await store.update_adapter_status("default", "sql", status, first.metadata.resource_version)


async def update_status_keeps_spec(new_store: StoreFactory, traits: Traits) -> None:
    """A status write keeps spec and generation."""
    store = new_store()
    first = await store.create_adapter(make_adapter())
    status = LoRAAdapterStatus(
        phase=LoRAAdapterPhase.LOADED,
        loaded_replicas=1,
        total_replicas=2,
        conditions=[Condition(type="Loaded", status="True", reason="Loaded")],
    )
    rv = first.metadata.resource_version
    updated = await store.update_adapter_status("default", "sql", status, rv)
    assert updated.status == status
    assert updated.spec == first.spec
    assert updated.metadata.generation == 1
    assert (await store.get_adapter("default", "sql")).status == status


async def delete_and_recreate(new_store: StoreFactory, traits: Traits) -> None:
    """A recreated adapter is a new object at a newer resourceVersion."""
    store = new_store()
    first = await store.create_adapter(make_adapter())
    await store.delete_adapter("default", "sql")
    assert await store.list_adapters() == []
    again = await store.create_adapter(make_adapter())
    assert again.metadata.uid != first.metadata.uid
    assert int(again.metadata.resource_version or 0) > int(first.metadata.resource_version or 0)


async def adapters_outlive_their_model(new_store: StoreFactory, traits: Traits) -> None:
    """Like Kubernetes without owner references: deleting the base Model keeps its adapters."""
    store = new_store()
    model = Model.model_validate(
        {"metadata": {"name": "llama"}, "spec": {"backend": "vllm", "source": "hf://o/m"}}
    )
    await store.create_model(model)
    await store.create_adapter(make_adapter())
    await store.delete_model("default", "llama")
    assert [a.key for a in await store.list_adapters()] == ["default/sql"]


ADAPTER_STORE_CHECKS: list[Check] = [
    create_get_list,
    conflicts_and_not_found,
    generation_bumps_on_spec_change,
    stale_resource_version_conflicts,
    update_status_keeps_spec,
    delete_and_recreate,
    adapters_outlive_their_model,
]
