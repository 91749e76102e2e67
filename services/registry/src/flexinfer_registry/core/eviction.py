"""Removing models: DeleteModel, admin eviction, and the LRU eviction task.

Only DOWNLOADED models are evicted automatically, and never one this process is
downloading or streaming. Files are removed before the record, so a concurrent reader sees
either the whole model or a record whose files are missing (which triggers a re-download,
never a false hit).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from flexinfer_common.errors import ConflictError, NotFoundError
from flexinfer_registry.core.cache import ModelCache
from flexinfer_registry.core.inuse import InUse
from flexinfer_registry.core.metrics import RegistryMetrics
from flexinfer_registry.core.paths import check_model_name
from flexinfer_registry.core.records import ModelRecord, ModelStatus
from flexinfer_registry.core.store import ModelRegistryStore

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EvictionPolicy:
    """LRU limits (ModelExpress's ``cache.eviction.policy``)."""

    unused_threshold_s: float = 7 * 24 * 3600.0
    max_models: int | None = None


def belongs_to(key: str, name: str) -> bool:
    """Whether cache key ``key`` is one of model ``name``'s entries (any revision, mode)."""
    return key == name or key.startswith((f"{name}@", f"{name}#"))


class ModelRemover:
    """Deletes and evicts cached models."""

    def __init__(
        self,
        store: ModelRegistryStore,
        cache: ModelCache,
        *,
        in_use: InUse,
        metrics: RegistryMetrics,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.cache = cache
        self.in_use = in_use
        self.metrics = metrics
        self.clock = clock

    async def remove(self, key: str, *, only_downloaded: bool = True) -> ModelRecord:
        """Remove one cache entry; NotFoundError / ConflictError when it cannot be."""
        record = await self.store.get(key)
        if record is None:
            raise NotFoundError(f"no cached model {key[:200]!r}")
        if key in self.in_use:
            raise ConflictError(f"model {key[:200]!r} is in use (downloading or streaming)")
        if record.status == ModelStatus.DOWNLOADING:
            raise ConflictError(f"model {key[:200]!r} is downloading")
        if only_downloaded and record.status != ModelStatus.DOWNLOADED:
            raise ConflictError(f"model {key[:200]!r} is {record.status.name}, not DOWNLOADED")
        await asyncio.to_thread(self.cache.remove, key)
        await self.store.delete(key)
        return record

    async def delete_model(self, name: str) -> list[str]:
        """DeleteModel: every cache entry of ``name`` (all revisions and weight modes)."""
        check_model_name(name)
        keys = [r.name for r in await self.store.list_by_last_used() if belongs_to(r.name, name)]
        if not keys:
            raise NotFoundError(f"no cached model {name[:200]!r}")
        for key in keys:
            await self.remove(key, only_downloaded=False)
        return keys

    async def evict_once(self, policy: EvictionPolicy) -> list[str]:
        """One LRU pass: unused past the threshold, then the oldest beyond ``max_models``."""
        now = self.clock()
        downloaded = [
            r
            for r in await self.store.list_by_last_used()
            if r.status == ModelStatus.DOWNLOADED and r.name not in self.in_use
        ]
        cutoff = now - policy.unused_threshold_s
        victims = [r for r in downloaded if r.last_used_at < cutoff]
        if policy.max_models is not None:
            keep = downloaded[len(downloaded) - policy.max_models :] if policy.max_models else []
            excess = [r for r in downloaded if r not in keep and r not in victims]
            victims += excess
        evicted: list[str] = []
        for record in victims:
            try:
                await self.remove(record.name)
            except (NotFoundError, ConflictError) as exc:
                log.info("eviction skipped %s: %s", record.name, exc)
                continue
            self.metrics.evictions.inc()
            evicted.append(record.name)
        if evicted:
            log.info("evicted %d models: %s", len(evicted), ", ".join(evicted))
        return evicted

    async def run(self, policy: EvictionPolicy, interval_s: float) -> None:
        """Evict every ``interval_s`` until cancelled; errors are logged, not fatal."""
        while True:
            await asyncio.sleep(interval_s)
            try:
                await self.evict_once(policy)
            except Exception:
                log.exception("eviction pass failed")
