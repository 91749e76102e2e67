"""What downloads, file serving and removal share."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from flexinfer_registry.core.cache import ModelCache
from flexinfer_registry.core.inuse import InUse
from flexinfer_registry.core.metrics import RegistryMetrics
from flexinfer_registry.core.store import ModelRegistryStore


@dataclass(frozen=True)
class CacheContext:
    """The model records, the cache on disk, which models are in use, the metrics and the
    clock (seconds since the epoch), one of each per registry process.

    DownloadTracker, ModelFiles and ModelRemover all take one, so they agree on what is in
    use (a model being served is never evicted) and count into the same metrics.
    """

    store: ModelRegistryStore
    cache: ModelCache
    in_use: InUse = field(default_factory=InUse)
    metrics: RegistryMetrics = field(default_factory=RegistryMetrics)
    clock: Callable[[], float] = time.time
