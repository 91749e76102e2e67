"""The catalog loop: its own work queue and workers, apart from the Model reconcile.

A registry can take minutes to list; Model reconciles must never wait behind it, so
catalogs have their own queue and ``workers`` tasks (at most that many catalogs sync at
once). Keys come from the feed (the apiserver's informers on Kubernetes), the admin API,
the reconciler's own timers, and a periodic resync of every stored catalog, the safety
net for anything missed (a catalog written by another controller to a shared database).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from flexinfer_common.errors import FlexInferError, TemporaryError
from flexinfer_common.store import ModelStore
from flexinfer_controller.catalog.reconcile import CatalogReconciler
from flexinfer_controller.core.feed import ModelFeed
from flexinfer_controller.core.queue import ShutDownError, WorkQueue

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
        self._failures: dict[str, int] = {}
        self._tasks: list[asyncio.Task[None]] = []

    def enqueue(self, key: str) -> int:
        """Queue a reconcile of the catalog ``key``."""
        return self.queue.add(key)

    async def start(self) -> None:
        """Start the workers, the feed and the resync loop (which lists every catalog now)."""
        for index in range(self._workers):
            self._spawn(self._worker(), f"catalog-worker-{index}")
        self._spawn(self._feed.run(self.enqueue), "catalog-feed")
        self._spawn(self._resync_loop(), "catalog-resync")

    def _spawn(self, coro: object, name: str) -> None:
        assert asyncio.iscoroutine(coro)
        self._tasks.append(asyncio.create_task(coro, name=name))

    async def stop(self) -> None:
        """Stop everything; a sync in flight is cancelled (the next start redoes it)."""
        self.queue.shut_down()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()

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

    async def _worker(self) -> None:
        while True:
            try:
                key = await self.queue.get()
            except ShutDownError:
                return
            try:
                await self.reconciler.reconcile(key)
            except Exception as exc:  # a worker must survive any one catalog's failure
                self._retry(key, exc)
            else:
                self._failures.pop(key, None)
            finally:
                self.queue.done(key)

    def _retry(self, key: str, exc: Exception) -> None:
        # Store failures and conflicts (a spec changed mid-sync): registries' own failures
        # never get here, they are written to status by the reconciler.
        count = self._failures[key] = self._failures.get(key, 0) + 1
        delay = min(MAX_ERROR_DELAY_S, 0.1 * 2 ** min(count, 10))
        if isinstance(exc, TemporaryError):
            delay = max(delay, min(exc.delay, MAX_ERROR_DELAY_S))
        level = logging.WARNING if isinstance(exc, FlexInferError) else logging.ERROR
        log.log(level, "catalog %s: reconcile failed (retry in %.1fs): %s", key, delay, exc,
                exc_info=not isinstance(exc, FlexInferError))  # fmt: skip
        self.queue.add_after(key, delay)
