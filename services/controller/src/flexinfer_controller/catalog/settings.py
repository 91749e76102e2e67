"""Settings of the ModelCatalog sync (``FLEXINFER_CATALOG_*``)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class CatalogSettings(BaseSettings):
    """How catalogs are synced; each catalog's own ``spec.syncInterval`` says how often."""

    model_config = SettingsConfigDict(env_prefix="FLEXINFER_CATALOG_", extra="ignore")

    workers: int = Field(default=4, ge=1, le=64)
    """Catalogs synced at once; they have their own workers, so Models never wait on them."""

    request_concurrency: int = Field(default=8, ge=1, le=256)
    """Manifest requests in flight per registry during a sync."""

    registry_timeout_s: float = Field(default=300.0, gt=0)
    """Seconds one registry may take to list; past it, that registry fails (temporarily)."""

    request_timeout_s: float = Field(default=30.0, gt=0)
    """Seconds one registry request may take."""

    retry_initial_s: float = Field(default=5.0, gt=0)
    """First retry after a registry failed temporarily; doubles per failure."""

    retry_max_s: float = Field(default=300.0, gt=0)
    """Longest retry delay (the catalog's syncInterval bounds it too)."""

    resync_interval_s: float = Field(default=60.0, gt=0)
    """Seconds between checks of every stored catalog (a safety net for missed changes)."""

    secrets_dir: Path | None = None
    """Local runtime: where ``secretRef`` Secrets are read, as
    ``<dir>/<namespace>/<name>/.dockerconfigjson`` (a Secret volume's layout). Unset: a
    registry with a secretRef fails with ``SecretNotFound``. On Kubernetes the Secret is
    read from the apiserver instead."""
