"""The catalog loop: its own work queue and workers, apart from the Model reconcile.

A registry can take minutes to list; Model reconciles must never wait behind it, so
catalogs have their own queue and ``workers`` tasks (at most that many catalogs sync at
once). Keys come from the feed (the apiserver's informers on Kubernetes), the admin API,
the reconciler's own timers, and a periodic resync of every stored catalog, the safety
net for anything missed (a catalog written by another controller to a shared database).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from flexinfer_common.errors import FlexInferError
from flexinfer_common.store import ModelStore
from flexinfer_controller.catalog.reconcile import CatalogReconciler
from flexinfer_controller.core.feed import ModelFeed
from flexinfer_controller.core.queue import WorkQueue
from flexinfer_controller.core.workers import Backoff, Tasks

log = logging.getLogger(__name__)
MAX_ERROR_DELAY_S = 60.0

ReconcilerFactory = Callable[[WorkQueue], CatalogReconciler]


class CatalogController:
    """Runs catalog reconciles from every trigger, ``workers`` at a time."""

    def __init__(
        self,
        store: ModelStore,
        reconciler: ReconcilerFactory,
        *,
        feed: ModelFeed,
        workers: int = 4,
        resync_interval_s: float = 60.0,
    ) -> None:
        self._store = store
        self.queue = WorkQueue()
        self.reconciler = reconciler(self.queue)
        self._feed = feed
        self._workers = workers
        self._resync_interval_s = resync_interval_s
        # What fails a catalog reconcile is the store (or a conflict: a spec changed
        # mid-sync); registries' own failures are written to status, never raised here.
        self._backoff = Backoff(max_s=MAX_ERROR_DELAY_S)
        self._tasks = Tasks()

    def enqueue(self, key: str) -> int:
        """Queue a reconcile of the catalog ``key``."""
        return self.queue.add(key)

    async def start(self) -> None:
        """Start the workers, the feed and the resync loop (which lists every catalog now)."""
        reconcile = self.reconciler.reconcile
        self._tasks.spawn_workers(self._workers, self.queue, reconcile, self._backoff, "catalog")
        self._tasks.spawn(self._feed.run(self.enqueue), "catalog-feed")
        self._tasks.spawn(self._resync_loop(), "catalog-resync")

    async def stop(self) -> None:
        """Stop everything; a sync in flight is cancelled (the next start redoes it)."""
        self.queue.shut_down()
        await self._tasks.cancel()

    async def resync(self) -> None:
        """Queue every stored catalog."""
        for catalog in await self._store.list_catalogs():
            self.queue.add(catalog.key)

    async def _resync_loop(self) -> None:
        while True:
            try:
                await self.resync()
            except FlexInferError as exc:
                log.warning("catalog resync failed: %s", exc)
            await asyncio.sleep(self._resync_interval_s)
