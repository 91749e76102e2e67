"""The ModelCache loop: its own work queue and workers, fed by the informers.

Keys come from the feed (every add, update and delete the apiserver reports) and from the
reconcile itself, which names when to look again (a running Job is polled, a settled
cache resynced). A reconcile that raises is retried with the shared doubling backoff.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from flexinfer_controller.core.queue import WorkQueue
from flexinfer_controller.core.workers import Backoff, Tasks

Reconcile = Callable[[str], Awaitable[float | None]]
"""One pass over a key; the delay before the next look (None: only on events)."""
Feed = Callable[[Callable[[str], object]], Coroutine[Any, Any, None]]
"""Runs until cancelled, handing every changed key to its argument."""
MAX_ERROR_DELAY_S = 60.0


class ModelCacheController:
    """Runs ModelCache reconciles from the feed and their own timers, ``workers`` at a time."""

    def __init__(self, reconcile: Reconcile, feed: Feed, *, workers: int = 2) -> None:
        self._reconcile = reconcile
        self._feed = feed
        self._workers = workers
        self._backoff = Backoff(max_s=MAX_ERROR_DELAY_S)
        self._queue = WorkQueue()
        self._tasks = Tasks()

    def enqueue(self, key: str) -> int:
        """Queue a reconcile of the ModelCache ``key`` (namespace/name)."""
        return self._queue.add(key)

    async def _pass(self, key: str) -> None:
        delay = await self._reconcile(key)
        if delay is not None:
            self._queue.add_after(key, delay)

    async def start(self) -> None:
        """Start the workers and the feed."""
        if self._tasks:
            return
        self._queue = WorkQueue()  # a stopped queue hands out nothing: start afresh
        self._tasks.spawn_workers(
            self._workers, self._queue, self._pass, self._backoff, "modelcache"
        )
        self._tasks.spawn(self._feed(self.enqueue), "modelcache-feed")

    async def stop(self) -> None:
        """Stop the feed and the workers; a pass in flight is cancelled (the next start
        redoes it: every pass starts from what the apiserver holds)."""
        self._queue.shut_down()
        await self._tasks.cancel()
