"""Creating the store's tables while other processes create them too."""

from __future__ import annotations

import asyncio
from pathlib import Path

from flexinfer_common.settings import StoreSettings
from flexinfer_common.store.sql import SqlModelStore
from flexinfer_testing.services import postgres_database


async def race_first_calls(url: str, stores: int = 8) -> None:
    """``stores`` fresh stores on one empty database make their first call at once."""
    opened = [SqlModelStore.from_settings(StoreSettings(url=url)) for _ in range(stores)]
    try:
        results = await asyncio.gather(*(s.list_models() for s in opened))
        assert results == [[]] * stores
    finally:
        for store in opened:
            await store.close()


async def test_sqlite_tables_created_by_racing_stores(tmp_path: Path) -> None:
    for round_ in range(5):
        await race_first_calls(f"sqlite:///{tmp_path / f'race-{round_}.db'}")


async def test_postgres_tables_created_by_racing_stores() -> None:
    with postgres_database("flexinfer_schema_race") as url:
        await race_first_calls(url)
