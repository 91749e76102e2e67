"""The SQL stores on SQLite and on the real PostgreSQL: the contract suite and races."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from flexinfer_common.errors import StoreError
from flexinfer_registry.adapters.stores import create_stores
from flexinfer_registry.adapters.stores.sql import SqlModelStore, SqlSourceStore
from flexinfer_registry.core.records import ModelStatus, Provider
from flexinfer_registry.core.store import ModelRegistryStore, SourceStore, Stores
from flexinfer_registry.settings import RegistrySettings
from flexinfer_registry.testing.replicas import check_exactly_once, check_whole_records
from flexinfer_registry.testing.store_contract import (
    MODEL_STORE_CHECKS,
    SOURCE_STORE_CHECKS,
    T0,
    ModelStoreCheck,
    SourceStoreCheck,
)
from flexinfer_testing.services import postgres_database


@pytest.fixture(params=["sqlite", "postgresql"])
def sql_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty database: a SQLite file, or a fresh PostgreSQL database."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'registry.db'}"
        return
    with postgres_database("flexinfer_registry") as url:
        yield url


@pytest.mark.parametrize("check", MODEL_STORE_CHECKS, ids=lambda c: c.__name__)
async def test_sql_model_store_contract(check: ModelStoreCheck, sql_url: str) -> None:
    async def open_store() -> ModelRegistryStore:
        return SqlModelStore.from_url(sql_url)

    await check(open_store)


@pytest.mark.parametrize("check", SOURCE_STORE_CHECKS, ids=lambda c: c.__name__)
async def test_sql_source_store_contract(check: SourceStoreCheck, sql_url: str) -> None:
    async def open_store() -> SourceStore:
        return SqlSourceStore.from_url(sql_url)

    await check(open_store)


async def test_sql_set_status_never_leaves_a_partial_row(sql_url: str) -> None:
    await check_whole_records(SqlModelStore.from_url(sql_url), SqlModelStore.from_url(sql_url))


async def test_sql_crash_between_claim_and_completion(sql_url: str) -> None:
    crashed = SqlModelStore.from_url(sql_url)
    assert await crashed.try_claim("m", Provider.S3, now=T0)
    await crashed.close()
    survivor = SqlModelStore.from_url(sql_url)
    try:
        record = await survivor.get("m")
        assert record is not None
        assert record.status == ModelStatus.DOWNLOADING
        assert ModelStatus.DOWNLOADED not in await survivor.status_counts()
        assert await survivor.try_claim("m", Provider.S3, now=T0 + 61, stale_after=60)
    finally:
        await survivor.close()


async def test_sql_create_stores_by_name(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'r.db'}"
    stores = await create_stores(RegistrySettings(store="sql", sql_url=url))
    try:
        assert isinstance(stores.models, SqlModelStore)
        assert isinstance(stores.sources, SqlSourceStore)
        await stores.models.set_status("m", Provider.NGC, ModelStatus.DOWNLOADED, None, now=T0)
        assert await stores.models.get("m") is not None
    finally:
        await stores.close()


async def test_sql_unreachable_database_is_a_store_error() -> None:
    store = SqlModelStore.from_url("postgresql+psycopg://postgres@127.0.0.1:1/none")
    try:
        with pytest.raises(StoreError, match="registry SQL store failed"):
            await store.get("m")
    finally:
        await store.close()


@pytest.mark.parametrize("missing_files", [False, True], ids=["fresh", "missing-files"])
async def test_sql_exactly_once_across_two_replicas(
    sql_url: str, tmp_path: Path, missing_files: bool
) -> None:
    """100 EnsureModelDownloaded calls over two registry apps sharing one database."""
    stores = Stores(
        models=SqlModelStore.from_url(sql_url), sources=SqlSourceStore.from_url(sql_url)
    )
    try:
        await check_exactly_once(stores, tmp_path / "cache", missing_files=missing_files)
    finally:
        await stores.close()
