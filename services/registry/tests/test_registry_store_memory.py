"""The store contract suite against the in-memory stores."""

from __future__ import annotations

import pytest

from flexinfer_common.errors import ConfigError
from flexinfer_registry.adapters.stores import create_stores, store_factory
from flexinfer_registry.adapters.stores.memory import MemoryModelStore, MemorySourceStore
from flexinfer_registry.core.store import ModelRegistryStore, SourceStore
from flexinfer_registry.settings import RegistrySettings
from flexinfer_registry.testing.store_contract import (
    MODEL_STORE_CHECKS,
    SOURCE_STORE_CHECKS,
    ModelStoreCheck,
    SourceStoreCheck,
)


@pytest.mark.parametrize("check", MODEL_STORE_CHECKS, ids=lambda c: c.__name__)
async def test_memory_model_store(check: ModelStoreCheck) -> None:
    shared = MemoryModelStore()

    async def open_store() -> ModelRegistryStore:
        return shared

    await check(open_store)


@pytest.mark.parametrize("check", SOURCE_STORE_CHECKS, ids=lambda c: c.__name__)
async def test_memory_source_store(check: SourceStoreCheck) -> None:
    shared = MemorySourceStore()

    async def open_store() -> SourceStore:
        return shared

    await check(open_store)


async def test_create_stores_memory_by_name() -> None:
    stores = await create_stores(RegistrySettings(store="Memory"))
    assert isinstance(stores.models, MemoryModelStore)
    assert isinstance(stores.sources, MemorySourceStore)
    await stores.close()


def test_unknown_store_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="unknown registry store 'etcd'"):
        store_factory("etcd")
