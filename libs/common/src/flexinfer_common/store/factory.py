"""Build the configured ModelStore from settings."""

from __future__ import annotations

from flexinfer_common.settings import StoreSettings
from flexinfer_common.store.base import ModelStore


def create_store(settings: StoreSettings) -> ModelStore:
    """The SQL ModelStore at ``settings.url`` (tables are created if missing)."""
    from flexinfer_common.store.sql import SqlModelStore

    return SqlModelStore.from_settings(settings)
