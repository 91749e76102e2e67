"""Store backends by name: ``create_stores(settings)`` builds the one ``settings.store`` names.

Each backend is a sibling module exposing ``async def create_stores(settings) -> Stores``;
modules are imported only when chosen, so a backend's client library (redis, sqlmodel,
kubernetes) is needed only where it is used.
"""

from __future__ import annotations

import importlib
from collections.abc import Awaitable, Callable
from typing import cast

from flexinfer_common.errors import ConfigError
from flexinfer_registry.core.store import Stores
from flexinfer_registry.settings import RegistrySettings

StoreFactory = Callable[[RegistrySettings], Awaitable[Stores]]

# name -> module; "k8s" and "crd" are the ModelExpress server's aliases for kubernetes.
BACKENDS: dict[str, str] = {
    "memory": "flexinfer_registry.adapters.stores.memory",
    "redis": "flexinfer_registry.adapters.stores.redis",
    "sql": "flexinfer_registry.adapters.stores.sql",
    "kubernetes": "flexinfer_registry.adapters.stores.kubernetes",
    "k8s": "flexinfer_registry.adapters.stores.kubernetes",
    "crd": "flexinfer_registry.adapters.stores.kubernetes",
}


def store_factory(name: str) -> StoreFactory:
    """The ``create_stores`` function of backend ``name`` (case-insensitive)."""
    module_name = BACKENDS.get(name.strip().lower())
    if module_name is None:
        known = ", ".join(sorted(BACKENDS))
        raise ConfigError(f"unknown registry store {name!r}; known: {known}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"registry store {name!r} is unavailable: {exc}") from exc
    return cast(StoreFactory, module.create_stores)


async def create_stores(settings: RegistrySettings) -> Stores:
    """Connect the stores ``settings.store`` names."""
    return await store_factory(settings.store)(settings)
