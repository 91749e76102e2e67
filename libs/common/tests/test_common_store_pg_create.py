"""The SQL store creates its PostgreSQL database when it is missing (real PostgreSQL)."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit, urlunsplit

import pytest
from sqlalchemy.engine import make_url

from flexinfer_common.api import Model
from flexinfer_common.errors import StoreError
from flexinfer_common.settings import StoreSettings
from flexinfer_common.store.pg_database import ensure_database
from flexinfer_common.store.sql import SqlModelStore
from flexinfer_testing.services import absent_postgres_database, database_exists, postgres_role

pytestmark = pytest.mark.postgres


def _model(name: str) -> Model:
    return Model.model_validate(
        {
            "apiVersion": "ai.flexinfer/v1alpha2",
            "kind": "Model",
            "metadata": {"name": name},
            "spec": {"backend": "reference", "source": "file:///models/x"},
        }
    )


async def test_open_creates_the_missing_database_and_its_tables() -> None:
    with absent_postgres_database() as (url, name):
        assert not database_exists(name)
        store = SqlModelStore.from_settings(StoreSettings(url=url))
        try:
            await store.open()
            assert database_exists(name)
            await store.create_model(_model("tiny"))
            assert [m.metadata.name for m in await store.list_models()] == ["tiny"]
        finally:
            await store.close()


def test_processes_racing_to_create_it_all_succeed_and_one_creates_it() -> None:
    with absent_postgres_database() as (url, name):
        racers = 8
        start = threading.Barrier(racers)

        def race() -> bool | None:
            start.wait()
            return ensure_database(make_url(url))

        with ThreadPoolExecutor(racers) as pool:
            results = list(pool.map(lambda _: race(), range(racers)))
        assert sorted(results, key=str) == [False] * (racers - 1) + [True]
        assert database_exists(name)


async def test_stores_opening_at_once_share_one_new_database() -> None:
    with absent_postgres_database() as (url, name):
        stores = [SqlModelStore.from_settings(StoreSettings(url=url)) for _ in range(4)]
        try:
            await asyncio.gather(*(store.open() for store in stores))
            await stores[0].create_model(_model("shared"))
            assert [m.metadata.name for m in await stores[3].list_models()] == ["shared"]
        finally:
            await asyncio.gather(*(store.close() for store in stores))
        assert database_exists(name)


async def test_a_role_that_may_not_create_it_is_told_the_createdb_command() -> None:
    with absent_postgres_database() as (url, name), postgres_role() as role:
        parts = urlsplit(url)
        as_role = urlunsplit(parts._replace(netloc=f"{role}@{parts.hostname}:{parts.port}"))
        store = SqlModelStore.from_settings(StoreSettings(url=as_role))
        try:
            with pytest.raises(StoreError) as raised:
                await store.open()
        finally:
            await store.close()
        message = str(raised.value)
        assert "\n" not in message
        assert f"createdb -h {parts.hostname} -p {parts.port} -O {role} {name}" in message
        assert f'role "{role}" may not create it' in message
        assert not database_exists(name)


async def test_a_server_that_is_down_is_not_reported_as_a_missing_database() -> None:
    url = "postgresql+psycopg://postgres@127.0.0.1:1/flexinfer_nowhere"
    assert ensure_database(make_url(url), connect_timeout_s=2) is None
    store = SqlModelStore.from_settings(StoreSettings(url=url))
    try:
        with pytest.raises(StoreError, match="store unavailable") as raised:
            await store.open()
    finally:
        await store.close()
    assert "createdb" not in str(raised.value)
