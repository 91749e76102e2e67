"""The ModelStore contract (flexinfer_common.testing), run on SQLite (memory, file) and PostgreSQL.

PostgreSQL cases are marked ``postgres`` and use a database created for this session
(flexinfer_test_<random>, dropped at the end) on FLEXINFER_TEST_POSTGRES_URL; they skip
when the server is unreachable, unless CI=true, where they fail.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import text

from flexinfer_common.errors import ConfigError, InvalidSpecError, NotFoundError, StoreError
from flexinfer_common.placement import benchmark_key
from flexinfer_common.settings import StoreSettings
from flexinfer_common.store import create_store
from flexinfer_common.store.base import BenchmarkRecord, EndpointRecord
from flexinfer_common.store.sql import SqlModelStore
from flexinfer_common.store.sql_schema import METADATA
from flexinfer_common.testing.store_contract import MODEL_STORE_CHECKS, Check, Traits, make_model
from flexinfer_common.testing.store_contract_catalog import CATALOG_STORE_CHECKS
from flexinfer_common.testing.store_contract_lora import ADAPTER_STORE_CHECKS
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


@pytest.mark.parametrize(
    "check",
    [*MODEL_STORE_CHECKS, *ADAPTER_STORE_CHECKS, *CATALOG_STORE_CHECKS],
    ids=lambda c: c.__name__,
)
async def test_sql_store_contract(check: Check, new_store: StoreFactory) -> None:
    await check(new_store, Traits(noop_write_bumps_version=True))


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


@pytest.fixture
def store(new_store: StoreFactory) -> SqlModelStore:
    """One store of the parametrized backend."""
    return new_store()


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


async def test_benchmark_results_are_kept_per_namespace_and_key(new_store: StoreFactory) -> None:
    store = new_store()
    at = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    first = BenchmarkRecord("default", "vllm", "m", "vendor=NVIDIA,arch=sm_89", 12.5, at)
    other = BenchmarkRecord("team-b", "vllm", "m", "vendor=NVIDIA,arch=sm_89", 7.0, at)
    await store.put_benchmark(first)
    await store.put_benchmark(other)
    assert await store.list_benchmarks("default") == [first]
    # A new measurement of the same (backend, model, device class) replaces the old one.
    again = BenchmarkRecord("default", "vllm", "m", "vendor=NVIDIA,arch=sm_89", 20.0, at)
    await store.put_benchmark(again)
    assert await store.list_benchmarks("default") == [again]
    assert again.key == benchmark_key("vllm", "m", "vendor=NVIDIA,arch=sm_89")
    assert await store.list_benchmarks("nobody") == []
