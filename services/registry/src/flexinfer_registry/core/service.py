"""Everything the registry's transports call, built once per app."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from flexinfer_registry.core.admission import Admission
from flexinfer_registry.core.cache import ModelCache
from flexinfer_registry.core.context import CacheContext
from flexinfer_registry.core.downloads import DownloadTracker, ProviderResolver, TrackerTiming
from flexinfer_registry.core.eviction import EvictionPolicy, ModelRemover
from flexinfer_registry.core.files import ModelFiles
from flexinfer_registry.core.identity import IdentityLimits
from flexinfer_registry.core.info import ServerInfo
from flexinfer_registry.core.inuse import InUse
from flexinfer_registry.core.metrics import RegistryMetrics
from flexinfer_registry.core.sources import SourceRegistry
from flexinfer_registry.core.store import Stores


@dataclass(frozen=True)
class CoreConfig:
    """The core's knobs (RegistrySettings maps onto them)."""

    cache_dir: Path
    timing: TrackerTiming = field(default_factory=TrackerTiming)
    heartbeat_timeout_s: float = 90.0
    gc_timeout_s: float = 3600.0
    default_chunk_size: int = 1024 * 1024
    max_chunk_size: int = 16 * 1024 * 1024
    eviction: EvictionPolicy = field(default_factory=EvictionPolicy)
    evict_on_download: bool = True
    """Run ``ModelRemover.make_room`` before each new download and
    ``ModelRemover.enforce_size`` after it (off with eviction off)."""
    limits: IdentityLimits = field(default_factory=IdentityLimits)
    """Bounds on names, identity fields, tensors and workers a request may carry."""


@dataclass
class RegistryCore:
    """The registry's logic: downloads, files, removal, P2P sources."""

    config: CoreConfig
    stores: Stores
    cache: ModelCache
    admission: Admission
    tracker: DownloadTracker
    files: ModelFiles
    remover: ModelRemover
    sources: SourceRegistry
    metrics: RegistryMetrics
    info: ServerInfo

    def chunk_size(self, requested: int) -> int:
        """The StreamModelFiles chunk size for a request (0 = default, capped at the max)."""
        if requested <= 0:
            return self.config.default_chunk_size
        return min(requested, self.config.max_chunk_size)

    async def close(self) -> None:
        """Cancel downloads (the stores belong to whoever built them)."""
        await self.tracker.close()


def build_core(
    config: CoreConfig,
    stores: Stores,
    providers: ProviderResolver,
    *,
    metrics: RegistryMetrics | None = None,
    info: ServerInfo | None = None,
    clock: Callable[[], float] = time.time,
) -> RegistryCore:
    """Wire the core's parts around one store pair, cache folder and provider registry."""
    metrics = metrics or RegistryMetrics()
    cache = ModelCache(config.cache_dir)
    context = CacheContext(stores.models, cache, InUse(), metrics, clock)
    remover = ModelRemover(context)
    tracker = DownloadTracker(
        context,
        providers,
        timing=config.timing,
        make_room=(
            partial(remover.make_room, config.eviction) if config.evict_on_download else None
        ),
        after_download=(
            partial(remover.enforce_size, config.eviction) if config.evict_on_download else None
        ),
    )
    return RegistryCore(
        config=config,
        stores=stores,
        cache=cache,
        admission=Admission(providers, config.limits),
        tracker=tracker,
        files=ModelFiles(context),
        remover=remover,
        sources=SourceRegistry(
            stores.sources,
            heartbeat_timeout_s=config.heartbeat_timeout_s,
            gc_timeout_s=config.gc_timeout_s,
            clock=clock,
            limits=config.limits,
        ),
        metrics=metrics,
        info=info or ServerInfo(),
    )
