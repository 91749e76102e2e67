"""The ModelStore contract, run against SQLite (in memory and in a file) and PostgreSQL.

PostgreSQL cases are marked ``postgres`` and use a database created for this session
(flexinfer_test_<random>, dropped at the end) on FLEXINFER_TEST_POSTGRES_URL; they skip
when the server is unreachable, unless CI=true, where they fail.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from flexinfer_common.api import Condition, Model, ModelPhase, ModelStatus
from flexinfer_common.api.meta import set_condition
from flexinfer_common.errors import (
    ConfigError,
    ConflictError,
    InvalidSpecError,
    NotFoundError,
    StoreError,
)
from flexinfer_common.settings import StoreSettings
from flexinfer_common.store import create_store
from flexinfer_common.store.base import EndpointRecord
from flexinfer_common.store.sql import SqlModelStore
from flexinfer_common.store.sql_schema import METADATA
from flexinfer_testing.services import postgres_database

StoreFactory = Callable[[], SqlModelStore]


@pytest.fixture(scope="session")
def pg_database() -> Iterator[str]:
    """A fresh PostgreSQL database for this test session; dropped at the end."""
    with postgres_database() as url:
        yield url


@pytest.fixture(
    params=["sqlite-memory", "sqlite-file", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The database URL of one backend."""
    if request.param == "postgres":
        url: str = request.getfixturevalue("pg_database")
        return url
    if request.param == "sqlite-file":
        return f"sqlite:///{tmp_path / 'nested' / 'dir' / 'store.db'}"
    return "sqlite://"


@pytest.fixture
async def new_store(store_url: str) -> AsyncIterator[StoreFactory]:
    """Stores on one database (in-memory SQLite: one shared store); all emptied and closed."""
    made: list[SqlModelStore] = []

    def factory() -> SqlModelStore:
        if store_url == "sqlite://" and made:
            return made[0]  # every in-memory engine is a separate database
        store = SqlModelStore.from_settings(StoreSettings(url=store_url))
        made.append(store)
        return store

    try:
        yield factory
    finally:
        if made and store_url.startswith("postgresql"):
            await asyncio.to_thread(METADATA.drop_all, made[0].engine)
        for store in made:
            await store.close()


@pytest.fixture
def store(new_store: StoreFactory) -> SqlModelStore:
    """One store of the parametrized backend."""
    return new_store()


def make_model(name: str = "llama", namespace: str = "default", **spec: Any) -> Model:
    """A Model with durations, labels and a status with timestamps."""
    body = {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"team": "ml"},
            "annotations": {"note": "ünïcode ok"},
        },
        "spec": {
            "backend": "vllm",
            "source": "hf://org/model",
            "serverless": {"idleTimeout": "1h30m", "coldStartTimeout": "250ms"},
            "gpu": {"vendor": "nvidia", "count": 1, "swapCooldown": "45s"},
            "config": {"maxModelLen": 4096, "nested": {"list": [1, 2.5, "x"]}},
            **spec,
        },
    }
    return Model.model_validate(body)


async def test_create_and_get_round_trip(store: SqlModelStore) -> None:
    model = make_model()
    created = await store.create_model(model)
    meta = created.metadata
    assert uuid.UUID(meta.uid or "").version == 4
    assert meta.generation == 1
    assert meta.resource_version is not None
    assert int(meta.resource_version) > 0
    assert meta.creation_timestamp is not None
    assert meta.creation_timestamp.utcoffset() == timedelta(0)
    assert abs(meta.creation_timestamp - datetime.now(UTC)) < timedelta(minutes=1)
    got = await store.get_model("default", "llama")
    assert got == created
    assert got.spec == model.spec
    assert got.spec.serverless is not None
    assert got.spec.serverless.idle_timeout == timedelta(hours=1, minutes=30)
    assert got.spec.serverless.cold_start_timeout == timedelta(milliseconds=250)
    assert got.metadata.labels == {"team": "ml"}
    assert got.metadata.annotations == {"note": "ünïcode ok"}
    assert got.status == model.status


async def test_status_round_trip_keeps_datetimes(store: SqlModelStore) -> None:
    created = await store.create_model(make_model())
    when = datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=timezone(timedelta(hours=2)))
    status = ModelStatus(
        phase=ModelPhase.READY,
        conditions=set_condition(
            [], Condition(type="Ready", status="True", reason="Up", last_transition_time=when)
        ),
        ready_replicas=1,
        last_active_time=when,
        observed_generation=1,
    )
    updated = await store.update_status(
        "default", "llama", status, created.metadata.resource_version
    )
    got = await store.get_model("default", "llama")
    assert got == updated
    assert got.status == status
    assert got.status.last_active_time == when
    assert got.status.conditions[0].last_transition_time == when


async def test_create_twice_is_a_conflict(store: SqlModelStore) -> None:
    await store.create_model(make_model())
    with pytest.raises(ConflictError, match="already exists"):
        await store.create_model(make_model())
    await store.create_model(make_model(namespace="other"))


async def test_missing_models(store: SqlModelStore) -> None:
    with pytest.raises(NotFoundError):
        await store.get_model("default", "nope")
    with pytest.raises(NotFoundError):
        await store.delete_model("default", "nope")
    with pytest.raises(NotFoundError):
        await store.replace_model(make_model("nope"))
    with pytest.raises(NotFoundError):
        await store.update_status("default", "nope", ModelStatus())
    assert await store.list_models() == []


async def test_list_is_ordered_by_key_and_filters_namespaces(store: SqlModelStore) -> None:
    for namespace, name in [("default", "z"), ("a", "y"), ("a-b", "x"), ("a", "b")]:
        await store.create_model(make_model(name, namespace))
    keys = [m.key for m in await store.list_models()]
    assert keys == sorted(keys) == ["a-b/x", "a/b", "a/y", "default/z"]
    assert [m.key for m in await store.list_models("a")] == ["a/b", "a/y"]
    assert await store.list_models("empty") == []


async def test_generation_bumps_only_when_the_spec_changes(store: SqlModelStore) -> None:
    created = await store.create_model(make_model())
    relabelled = created.model_copy(deep=True)
    relabelled.metadata.labels = {"team": "infra"}
    same_spec = await store.replace_model(relabelled)
    assert same_spec.metadata.generation == 1
    assert same_spec.metadata.labels == {"team": "infra"}
    assert int(same_spec.metadata.resource_version or 0) > int(
        created.metadata.resource_version or 0
    )
    assert same_spec.metadata.uid == created.metadata.uid
    assert same_spec.metadata.creation_timestamp == created.metadata.creation_timestamp
    changed = same_spec.model_copy(deep=True)
    changed.spec.source = "hf://org/other"
    bumped = await store.replace_model(changed)
    assert bumped.metadata.generation == 2
    assert bumped.spec.source == "hf://org/other"
    assert (await store.get_model("default", "llama")) == bumped


async def test_replace_keeps_status_and_status_keeps_spec(store: SqlModelStore) -> None:
    created = await store.create_model(make_model())
    ready = ModelStatus(phase=ModelPhase.READY, ready_replicas=2)
    with_status = await store.update_status("default", "llama", ready)
    assert with_status.metadata.generation == 1
    changed = with_status.model_copy(deep=True)
    changed.spec.backend = "llamacpp"
    changed.status = ModelStatus(phase=ModelPhase.FAILED)  # ignored by replace
    replaced = await store.replace_model(changed)
    assert replaced.status == ready
    assert replaced.spec.backend == "llamacpp"
    assert created.metadata.uid == replaced.metadata.uid


async def test_every_write_bumps_the_resource_version(store: SqlModelStore) -> None:
    versions = [int((await store.create_model(make_model())).metadata.resource_version or 0)]
    for phase in (ModelPhase.LOADING, ModelPhase.READY, ModelPhase.READY):
        model = await store.update_status("default", "llama", ModelStatus(phase=phase))
        versions.append(int(model.metadata.resource_version or 0))
    model = await store.replace_model(model)
    versions.append(int(model.metadata.resource_version or 0))
    assert versions == sorted(set(versions))
    # Reads do not bump it.
    assert (await store.get_model("default", "llama")).metadata.resource_version == str(
        versions[-1]
    )


async def test_stale_resource_versions_conflict(store: SqlModelStore) -> None:
    created = await store.create_model(make_model())
    fresh = await store.update_status("default", "llama", ModelStatus(phase=ModelPhase.LOADING))
    stale = created.model_copy(deep=True)
    stale.spec.backend = "stale"
    with pytest.raises(ConflictError, match="stale"):
        await store.replace_model(stale)
    with pytest.raises(ConflictError):
        await store.update_status(
            "default", "llama", ModelStatus(), created.metadata.resource_version
        )
    with pytest.raises(ConflictError):
        await store.update_status("default", "llama", ModelStatus(), "not-a-number")
    got = await store.get_model("default", "llama")
    assert got == fresh  # nothing was written by the losers
    stale.metadata.resource_version = None  # unconditional write
    assert (await store.replace_model(stale)).spec.backend == "stale"
    current = await store.get_model("default", "llama")
    assert (
        await store.replace_model(current)
    ).metadata.resource_version != current.metadata.resource_version


async def test_concurrent_writers_on_two_stores_exactly_one_wins(new_store: StoreFactory) -> None:
    one, two = new_store(), new_store()
    created = await one.create_model(make_model())
    for round_ in range(5):
        current = await two.get_model("default", "llama")
        rv = current.metadata.resource_version
        writes = []
        for i, store in enumerate([one, two] * 4):
            edited = current.model_copy(deep=True)
            edited.spec.backend = f"b{round_}-{i}"
            writes.append(store.replace_model(edited))
            status = ModelStatus(message=f"s{round_}-{i}")
            writes.append(store.update_status("default", "llama", status, rv))
        results = await asyncio.gather(*writes, return_exceptions=True)
        winners = [r for r in results if isinstance(r, Model)]
        losers = [r for r in results if isinstance(r, BaseException)]
        assert len(winners) == 1, results
        assert all(isinstance(e, ConflictError) for e in losers), losers
        assert await one.get_model("default", "llama") == winners[0]
    final = await two.get_model("default", "llama")
    assert final.metadata.uid == created.metadata.uid


async def test_concurrent_unconditional_writes_all_land(new_store: StoreFactory) -> None:
    one, two = new_store(), new_store()
    await one.create_model(make_model())
    writes = [
        (one if i % 2 else two).update_status("default", "llama", ModelStatus(replicas=i))
        for i in range(20)
    ]
    results = await asyncio.gather(*writes)
    versions = {r.metadata.resource_version for r in results}
    assert len(versions) == 20  # each write got its own version


async def test_delete_and_recreate(store: SqlModelStore) -> None:
    first = await store.create_model(make_model())
    now = datetime.now(UTC)
    await store.put_endpoint(EndpointRecord("default/llama", "r1", "http://a", True, None, now))
    await store.put_endpoint(EndpointRecord("default/other", "r1", "http://b", True, None, now))
    await store.delete_model("default", "llama")
    with pytest.raises(NotFoundError):
        await store.get_model("default", "llama")
    assert [e.model for e in await store.list_endpoints()] == ["default/other"]
    second = await store.create_model(make_model())
    assert second.metadata.uid != first.metadata.uid
    assert second.metadata.generation == 1
    # Versions are never reused, so a stale copy of the old object cannot overwrite this one.
    assert int(second.metadata.resource_version or 0) > int(first.metadata.resource_version or 0)
    with pytest.raises(ConflictError):
        await store.replace_model(first)


async def test_finalizers_hold_a_deleted_model_until_the_last_is_removed(
    store: SqlModelStore,
) -> None:
    model = make_model()
    model.metadata.finalizers = ["flexinfer.ai/model-cleanup", "example.com/other"]
    created = await store.create_model(model)
    now = datetime.now(UTC)
    await store.put_endpoint(EndpointRecord("default/llama", "r1", "http://a", True, None, now))
    await store.delete_model("default", "llama")
    held = await store.get_model("default", "llama")
    assert held.metadata.deletion_timestamp is not None
    assert int(held.metadata.resource_version or 0) > int(created.metadata.resource_version or 0)
    await store.delete_model("default", "llama")  # a second delete changes nothing
    assert await store.get_model("default", "llama") == held
    # A client can neither clear the stamp nor add a finalizer while the model is deleted.
    cleared = held.model_copy(deep=True)
    cleared.metadata.deletion_timestamp = None
    kept = await store.replace_model(cleared)
    assert kept.metadata.deletion_timestamp == held.metadata.deletion_timestamp
    kept.metadata.finalizers.append("example.com/late")
    with pytest.raises(InvalidSpecError, match="being deleted"):
        await store.replace_model(kept)
    kept.metadata.finalizers = ["example.com/other"]
    await store.replace_model(kept)
    assert len(await store.list_endpoints("default/llama")) == 1
    last = await store.get_model("default", "llama")
    last.metadata.finalizers = []
    await store.replace_model(last)
    with pytest.raises(NotFoundError):
        await store.get_model("default", "llama")
    assert await store.list_endpoints("default/llama") == []


async def test_a_replace_never_stamps_a_deletion(store: SqlModelStore) -> None:
    model = make_model()
    model.metadata.deletion_timestamp = datetime.now(UTC)
    model.metadata.finalizers = ["flexinfer.ai/model-cleanup"]
    assert (await store.create_model(model)).metadata.deletion_timestamp is None
    stored = await store.replace_model(model)
    assert stored.metadata.deletion_timestamp is None
    assert stored.metadata.finalizers == ["flexinfer.ai/model-cleanup"]


async def test_endpoint_crud(store: SqlModelStore) -> None:
    at = datetime(2025, 1, 2, 3, 4, 5, 678000, tzinfo=timezone(timedelta(hours=-5)))
    records = [
        EndpointRecord("default/b", "r2", "http://127.0.0.1:2", False, "node-1", at),
        EndpointRecord("default/a", "r9", "http://127.0.0.1:9", True, None, at),
        EndpointRecord("default/b", "r1", "http://127.0.0.1:1", True, "node-1", at),
    ]
    for record in records:
        await store.put_endpoint(record)
    listed = await store.list_endpoints()
    assert [(e.model, e.replica) for e in listed] == [
        ("default/a", "r9"),
        ("default/b", "r1"),
        ("default/b", "r2"),
    ]
    assert listed[0] == records[1]
    assert listed[0].updated_at == at
    assert listed[0].updated_at.tzinfo is not None
    later = at + timedelta(seconds=30)
    await store.put_endpoint(
        EndpointRecord("default/b", "r2", "http://127.0.0.1:3", True, None, later)
    )
    b = await store.list_endpoints("default/b")
    assert [(e.replica, e.url, e.ready, e.node) for e in b] == [
        ("r1", "http://127.0.0.1:1", True, "node-1"),
        ("r2", "http://127.0.0.1:3", True, None),
    ]
    assert b[1].updated_at == later
    await store.delete_endpoint("default/b", "r1")
    await store.delete_endpoint("default/b", "absent")  # no error
    assert [e.replica for e in await store.list_endpoints("default/b")] == ["r2"]
    assert await store.list_endpoints("default/none") == []


async def test_store_reopens_a_file_database(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "er" / "flexinfer.db"
    settings = StoreSettings(url=f"sqlite:///{path}")
    first = create_store(settings)
    assert isinstance(first, SqlModelStore)
    try:
        created = await first.create_model(make_model())
        with first.engine.connect() as conn:
            assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
    finally:
        await first.close()
    second = create_store(settings)
    try:
        assert await second.get_model("default", "llama") == created
    finally:
        await second.close()


async def test_unreachable_database_is_a_store_error() -> None:
    store = SqlModelStore.from_settings(
        StoreSettings(url="postgresql+psycopg://postgres@127.0.0.1:1/nothing")
    )
    try:
        with pytest.raises(StoreError, match="unavailable"):
            await store.get_model("default", "x")
    finally:
        await store.close()


def test_bad_urls_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="dialect"):
        SqlModelStore.from_settings(StoreSettings(url="mysql://x/y"))
    with pytest.raises(ConfigError, match="invalid store url"):
        SqlModelStore.from_settings(StoreSettings(url="::not a url::"))
