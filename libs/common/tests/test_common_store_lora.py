"""The ModelStore contract for LoRAAdapters, on SQLite (memory, file) and PostgreSQL."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from flexinfer_common.api import (
    Condition,
    LoRAAdapter,
    LoRAAdapterPhase,
    LoRAAdapterStatus,
    Model,
)
from flexinfer_common.errors import ConflictError, NotFoundError, PermanentError
from flexinfer_common.settings import StoreSettings
from flexinfer_common.store import EndpointRecord, ModelStore
from flexinfer_common.store.sql import SqlModelStore
from flexinfer_common.store.sql_schema import METADATA
from flexinfer_testing.services import postgres_database


@pytest.fixture(scope="module")
def pg_url() -> Iterator[str]:
    """One PostgreSQL database for this module; dropped at the end."""
    with postgres_database("flexinfer_lora_store") as url:
        yield url


@pytest.fixture(
    params=["sqlite-memory", "sqlite-file", pytest.param("postgres", marks=pytest.mark.postgres)]
)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[SqlModelStore]:
    """An empty store of one backend."""
    if request.param == "postgres":
        url: str = request.getfixturevalue("pg_url")
    elif request.param == "sqlite-file":
        url = f"sqlite:///{tmp_path / 'store.db'}"
    else:
        url = "sqlite://"
    opened = SqlModelStore.from_settings(StoreSettings(url=url))
    try:
        yield opened
    finally:
        if url.startswith("postgresql"):
            await asyncio.to_thread(METADATA.drop_all, opened.engine)
        await opened.close()


def adapter(name: str = "sql", namespace: str = "default", **spec: object) -> LoRAAdapter:
    """A LoRAAdapter on the ``llama`` Model."""
    body: dict[str, object] = {
        "modelRef": "llama",
        "adapterName": f"{name}-lora",
        "source": {"type": "HuggingFace", "uri": f"org/{name}"},
    }
    body.update(spec)
    return LoRAAdapter.model_validate(
        {"metadata": {"name": name, "namespace": namespace, "labels": {"a": "b"}}, "spec": body}
    )


async def test_create_get_list(store: SqlModelStore) -> None:
    created = await store.create_adapter(adapter("b"))
    meta = created.metadata
    assert (meta.generation, meta.namespace, meta.labels) == (1, "default", {"a": "b"})
    assert None not in (meta.uid, meta.resource_version, meta.creation_timestamp)
    assert created.status.phase is LoRAAdapterPhase.PENDING
    await store.create_adapter(adapter("a"))
    await store.create_adapter(adapter("a", namespace="ml"))
    assert await store.get_adapter("default", "b") == created
    assert [a.key for a in await store.list_adapters()] == ["default/a", "default/b", "ml/a"]
    assert [a.key for a in await store.list_adapters("ml")] == ["ml/a"]
    assert await store.list_models() == []  # adapters are not Models


async def test_create_twice_conflicts_and_missing_is_not_found(store: SqlModelStore) -> None:
    await store.create_adapter(adapter())
    with pytest.raises(ConflictError, match="loraadapter default/sql already exists"):
        await store.create_adapter(adapter())
    with pytest.raises(NotFoundError, match="loraadapter default/nope not found"):
        await store.get_adapter("default", "nope")
    with pytest.raises(NotFoundError):
        await store.replace_adapter(adapter("nope"))
    with pytest.raises(NotFoundError):
        await store.delete_adapter("default", "nope")


async def test_replace_bumps_generation_only_on_spec_change(store: SqlModelStore) -> None:
    first = await store.create_adapter(adapter())
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


async def test_stale_resource_version_conflicts(store: SqlModelStore) -> None:
    first = await store.create_adapter(adapter())
    await store.replace_adapter(first)  # first's resourceVersion is now stale
    with pytest.raises(ConflictError, match="is stale"):
        await store.replace_adapter(first)
    bogus = first.model_copy(deep=True)
    bogus.metadata.resource_version = "abc"
    with pytest.raises(ConflictError, match="not one we issued"):
        await store.replace_adapter(bogus)
    status = LoRAAdapterStatus(phase=LoRAAdapterPhase.FAILED, message="x")
    with pytest.raises(ConflictError):
        await store.update_adapter_status("default", "sql", status, first.metadata.resource_version)


async def test_update_status_keeps_spec(store: SqlModelStore) -> None:
    first = await store.create_adapter(adapter())
    status = LoRAAdapterStatus(
        phase=LoRAAdapterPhase.LOADED,
        loaded_replicas=1,
        total_replicas=2,
        conditions=[Condition(type="Loaded", status="True", reason="Loaded")],
    )
    updated = await store.update_adapter_status(
        "default", "sql", status, first.metadata.resource_version
    )
    assert updated.status == status
    assert updated.spec == first.spec
    assert updated.metadata.generation == 1
    assert (await store.get_adapter("default", "sql")).status == status


async def test_delete_and_recreate_never_reuses_a_version(store: SqlModelStore) -> None:
    first = await store.create_adapter(adapter())
    await store.delete_adapter("default", "sql")
    assert await store.list_adapters() == []
    again = await store.create_adapter(adapter())
    assert again.metadata.uid != first.metadata.uid
    assert int(again.metadata.resource_version or 0) > int(first.metadata.resource_version or 0)


async def test_adapters_outlive_their_model(store: SqlModelStore) -> None:
    # Like Kubernetes without owner references: deleting the base Model keeps its adapters.
    model = Model.model_validate(
        {"metadata": {"name": "llama"}, "spec": {"backend": "vllm", "source": "hf://o/m"}}
    )
    await store.create_model(model)
    await store.create_adapter(adapter())
    await store.delete_model("default", "llama")
    assert [a.key for a in await store.list_adapters()] == ["default/sql"]


async def test_a_store_without_adapters_holds_none() -> None:
    class Bare(ModelStore):
        """A store that implements only the abstract methods."""

        async def create_model(self, model: Model) -> Model:
            return model

        async def get_model(self, namespace: str, name: str) -> Model:
            raise NotFoundError(name)

        async def list_models(self, namespace: str | None = None) -> list[Model]:
            return []

        async def replace_model(self, model: Model) -> Model:
            return model

        async def update_status(self, *args: object, **kwargs: object) -> Model:
            raise NotFoundError("x")

        async def delete_model(self, namespace: str, name: str) -> None:
            return None

        async def put_endpoint(self, record: EndpointRecord) -> None:
            return None

        async def delete_endpoint(self, model: str, replica: str) -> None:
            return None

        async def list_endpoints(self, model: str | None = None) -> list[EndpointRecord]:
            return []

        async def close(self) -> None:
            return None

    bare = Bare()
    assert await bare.list_adapters() == []
    with pytest.raises(NotFoundError):
        await bare.get_adapter("default", "sql")
    with pytest.raises(PermanentError, match="does not keep LoRAAdapters"):
        await bare.create_adapter(adapter())
