"""Removing models: DeleteModel, admin eviction, and the LRU eviction task.

Only DOWNLOADED models are evicted automatically, and never one this process is
downloading or streaming. Files are removed before the record, so a concurrent reader sees
either the whole model or a record whose files are missing (which triggers a re-download,
never a false hit).

An eviction pass walks the models least recently used first and evicts each eligible one
for the first rule it breaks: unused past ``unused_threshold_s``; more DOWNLOADED models
than ``max_models``; cached files over ``max_size_bytes``; less than
``min_free_space_bytes`` free on the cache's filesystem. In-use and non-DOWNLOADED models
are never evicted but still count towards the model count and the cache size, since they
hold their disk all the same.

Between passes, each new download runs the size rule on its own once it is DOWNLOADED
(:meth:`ModelRemover.enforce_size`), so ``max_size_bytes`` holds after every download,
not just every ``eviction_interval_s``.
"""

from __future__ import annotations

import asyncio
import logging
import math
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from flexinfer_common.errors import ConflictError, NotFoundError
from flexinfer_registry.core.context import CacheContext
from flexinfer_registry.core.paths import check_model_name
from flexinfer_registry.core.records import ModelRecord, ModelStatus

log = logging.getLogger(__name__)

FreeSpace = Callable[[Path], int]
"""Bytes free on the filesystem holding a path (:func:`free_bytes`; tests pass a small disk)."""


@dataclass(frozen=True)
class EvictionPolicy:
    """LRU limits (ModelExpress's ``cache.eviction.policy`` and ``cache.max_size_bytes``)."""

    unused_threshold_s: float = 7 * 24 * 3600.0
    """Seconds a DOWNLOADED model may go unused."""
    max_models: int | None = None
    """Most DOWNLOADED models to keep (None = no cap)."""
    max_size_bytes: int | None = None
    """Most bytes of cached model files to keep (None = no cap)."""
    min_free_space_bytes: int | None = None
    """Bytes to keep free on the cache folder's filesystem (None = no floor)."""

    @property
    def watches_disk(self) -> bool:
        """Whether a pass must measure the cache on disk (a size or free-space rule is set)."""
        return self.max_size_bytes is not None or self.min_free_space_bytes is not None


def free_bytes(path: Path) -> int:
    """Bytes available to this process on the filesystem of ``path`` or its nearest parent."""
    for candidate in (path, *path.parents):
        try:
            return shutil.disk_usage(candidate).free
        except FileNotFoundError:  # the cache folder is created by the first download
            continue
    raise FileNotFoundError(f"no existing folder above {path}")


def human_bytes(count: int) -> str:
    """``count`` bytes for a log line or an error: "3.2 GiB"."""
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{count} B"  # pragma: no cover - the loop always returns


@dataclass
class _PassState:
    """What one eviction pass knows of the cache, updated as it evicts."""

    policy: EvictionPolicy
    now: float
    downloaded: int
    sizes: dict[str, int]
    """Bytes on disk per cached model still there (filled only when a disk rule is set)."""
    free: int | None

    @property
    def total(self) -> int:
        """Bytes of cached model files."""
        return sum(self.sizes.values())

    @property
    def over_size(self) -> bool:
        """The cache holds more than ``max_size_bytes``."""
        cap = self.policy.max_size_bytes
        return cap is not None and self.total > cap

    @property
    def under_floor(self) -> bool:
        """The disk has less than ``min_free_space_bytes`` free."""
        floor = self.policy.min_free_space_bytes
        return floor is not None and self.free is not None and self.free < floor

    def reason(self, record: ModelRecord) -> str | None:
        """The rule ``record`` breaks (the least recently used model left), or None."""
        policy = self.policy
        unused = self.now - record.last_used_at
        if unused > policy.unused_threshold_s:
            return f"unused_threshold: unused {unused:.0f}s > {policy.unused_threshold_s:.0f}s"
        if policy.max_models is not None and self.downloaded > policy.max_models:
            return f"max_models: {self.downloaded} DOWNLOADED > {policy.max_models}"
        if self.over_size:
            return (
                f"max_size_bytes: cache holds {human_bytes(self.total)}"
                f" > {human_bytes(policy.max_size_bytes or 0)}"
            )
        if self.under_floor:
            return (
                f"min_free_space_bytes: {human_bytes(self.free or 0)} free"
                f" < {human_bytes(policy.min_free_space_bytes or 0)}"
            )
        return None

    def unmet(self) -> str | None:
        """The size or free-space rule still broken after the pass, or None."""
        if self.over_size:
            return f"cache holds {human_bytes(self.total)}, over max_size_bytes"
        if self.under_floor:
            return f"{human_bytes(self.free or 0)} free, under min_free_space_bytes"
        return None


def belongs_to(key: str, name: str) -> bool:
    """Whether cache key ``key`` is one of model ``name``'s entries (any revision, mode)."""
    return key == name or key.startswith((f"{name}@", f"{name}#"))


class ModelRemover:
    """Deletes and evicts cached models."""

    def __init__(self, context: CacheContext, *, free_space: FreeSpace = free_bytes) -> None:
        self.store, self.cache = context.store, context.cache
        self.in_use, self.metrics, self.clock = context.in_use, context.metrics, context.clock
        self.free_space = free_space
        # Passes run one at a time: two would judge the same models and double-count them.
        self._pass_lock = asyncio.Lock()

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

    async def evict_once(self, policy: EvictionPolicy, *, keep: str | None = None) -> list[str]:
        """One LRU pass under every rule of ``policy`` (module docstring); the evicted keys.

        ``keep`` is never evicted (though it counts towards the limits, like in-use models).
        """
        async with self._pass_lock:
            records = await self.store.list_by_last_used()
            state = await self._measure(policy, records)
            evicted: list[str] = []
            for record in records:
                spared = record.name in self.in_use or record.name == keep
                if record.status != ModelStatus.DOWNLOADED or spared:
                    continue
                reason = state.reason(record)
                if reason is not None and await self._evict(record.name, reason, state):
                    evicted.append(record.name)
            unmet = state.unmet()
            if unmet is not None:
                log.warning(
                    "eviction: %s, and no model left may go (in use or not DOWNLOADED)", unmet
                )
            return evicted

    async def enforce_size(self, policy: EvictionPolicy, downloaded: str) -> list[str]:
        """After ``downloaded`` became DOWNLOADED: the pass's size rule alone, sparing it.

        Only ``max_size_bytes`` is applied: a new model is what can push the cache over it,
        while the age and count rules can wait for the periodic pass.
        """
        if policy.max_size_bytes is None:
            return []
        size_only = EvictionPolicy(
            unused_threshold_s=math.inf, max_size_bytes=policy.max_size_bytes
        )
        return await self.evict_once(size_only, keep=downloaded)

    async def make_room(self, policy: EvictionPolicy) -> str | None:
        """Before a new download: None to go ahead, else why it must not start.

        Below ``min_free_space_bytes`` an eviction pass runs first. If free space is still
        under the floor, the download is refused (the caller reports ERROR): it could only
        dig into the reserve the floor exists to keep, and a full disk breaks every model
        on it, not just the new one. ModelExpress accepts the setting without acting on it,
        so there is no behaviour of its to match. A download already running is not stopped
        when it crosses the floor: its size is unknown until it ends.
        """
        floor = policy.min_free_space_bytes
        if floor is None:
            return None
        free = await asyncio.to_thread(self.free_space, self.cache.root)
        if free >= floor:
            return None
        log.info("%s free, under min_free_space_bytes: evicting first", human_bytes(free))
        await self.evict_once(policy)
        free = await asyncio.to_thread(self.free_space, self.cache.root)
        if free >= floor:
            return None
        return (
            f"not enough free disk for a new download: {human_bytes(free)} free in the cache"
            f" folder, min_free_space_bytes is {human_bytes(floor)}, and no unused model is"
            " left to evict; free space or lower the limit"
        )

    async def run(self, policy: EvictionPolicy, interval_s: float) -> None:
        """Evict every ``interval_s`` until cancelled; errors are logged, not fatal."""
        while True:
            await asyncio.sleep(interval_s)
            try:
                await self.evict_once(policy)
            except Exception:
                log.exception("eviction pass failed")

    async def _measure(self, policy: EvictionPolicy, records: list[ModelRecord]) -> _PassState:
        """Count the DOWNLOADED models and, when a rule needs them, sizes and free space."""
        downloaded = sum(1 for r in records if r.status == ModelStatus.DOWNLOADED)
        sizes: dict[str, int] = {}
        free: int | None = None
        if policy.watches_disk:
            sizes = await asyncio.to_thread(
                lambda: {r.name: self.cache.disk_size(r.name) for r in records}
            )
        if policy.min_free_space_bytes is not None:
            free = await asyncio.to_thread(self.free_space, self.cache.root)
        return _PassState(policy, self.clock(), downloaded, sizes, free)

    async def _evict(self, key: str, reason: str, state: _PassState) -> bool:
        """Evict one model for ``reason`` and update ``state``; False when it was skipped."""
        try:
            await self.remove(key)
        except (NotFoundError, ConflictError) as exc:
            log.info("eviction skipped %s: %s", key, exc)
            return False
        self.metrics.evictions.inc()
        size = state.sizes.pop(key, 0)
        state.downloaded -= 1
        if state.free is not None:
            # Measured again, not added up: files still held open elsewhere free nothing.
            state.free = await asyncio.to_thread(self.free_space, self.cache.root)
        log.info("evicted %s (%s) by rule %s", key, human_bytes(size), reason)
        return True
