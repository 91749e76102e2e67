"""The adapter loop: its own work queue and workers, apart from the Model reconcile.

Keys are base Model keys. They come from the admin API and the apiserver's informers (an
adapter changed), the Model loop (a Model changed, a replica became ready or exited), the
proxies (a request waits for an adapter that is not preloaded), the adapter cache (a fetch
moved on), and a periodic resync of every Model that has adapters: the safety net that also
finds an engine which restarted in place and lost what it held.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from flexinfer_common.errors import FlexInferError
from flexinfer_common.store import ModelStore
from flexinfer_controller.backends import BackendRegistry
from flexinfer_controller.core.cache import Notify
from flexinfer_controller.core.lora.demand import DemandNotes
from flexinfer_controller.core.lora.engine import AdapterEngine
from flexinfer_controller.core.lora.reconciler import AdapterReconciler, Announce, Publish
from flexinfer_controller.core.lora.roots import AdapterRoots
from flexinfer_controller.core.lora.sources import AdapterCache
from flexinfer_controller.core.queue import WorkQueue
from flexinfer_controller.core.workers import Backoff, Tasks
from flexinfer_controller.runtime import ReplicaEvent, Runtime

log = logging.getLogger(__name__)


class AdapterController:
    """Runs adapter reconciles from every trigger, ``workers`` at a time."""

    def __init__(
        self,
        *,
        store: ModelStore,
        runtime: Runtime,
        backends: BackendRegistry,
        engine: AdapterEngine,
        cache: Callable[[Notify], AdapterCache],
        publish: Publish,
        announce: Announce,
        roots: AdapterRoots,
        workers: int = 2,
        resync_interval_s: float = 30.0,
    ) -> None:
        self._store = store
        self.queue = WorkQueue()
        self.demand = DemandNotes()
        self.cache = cache(self._fetch_moved)
        self.reconciler = AdapterReconciler(
            store=store, runtime=runtime, backends=backends, engine=engine,
            cache=self.cache, demand=self.demand, publish=publish, announce=announce,
            roots=roots,
        )  # fmt: skip
        self._workers = workers
        self._resync_interval_s = resync_interval_s
        self._backoff = Backoff(max_s=30.0)
        """A failed pass is retried after 0.1 s, doubling up to 30 s (or the error's delay)."""
        self._with_adapters: set[str] = set()
        """Model keys that had adapters at the last look: which Model changes concern us."""
        self._tasks = Tasks()

    def enqueue(self, model: str) -> int:
        """Reconcile the adapters of Model ``model`` (an adapter of it changed)."""
        self._with_adapters.add(model)
        return self.queue.add(model)

    def _fetch_moved(self, model: str) -> None:
        self.queue.add(model)

    def model_changed(self, model: str) -> None:
        """Model ``model`` (or one of its replicas) changed: look again if it has adapters."""
        if model in self._with_adapters:
            self.queue.add(model)

    def replica_changed(self, event: ReplicaEvent) -> None:
        """A replica became ready or exited: its engine may need adapters, or hold none now."""
        self.model_changed(event.replica.model)

    def demanded(self, model: str, adapter: str) -> None:
        """A request waits for ``adapter`` of ``model``: load it even if not preloaded."""
        self.demand.note(model, adapter)
        self.enqueue(model)

    async def start(self) -> None:
        """Start the workers and the resync loop (which lists every adapter now)."""
        self._tasks.spawn_workers(
            self._workers, self.queue, self._reconcile, self._backoff, "loraadapter"
        )
        self._tasks.spawn(self._resync_loop(), "loraadapter-resync")

    async def stop(self) -> None:
        """Stop the loop; a pass in flight is cancelled (the next start redoes it)."""
        self.queue.shut_down()
        await self._tasks.cancel()
        await self.cache.close()

    async def resync(self) -> None:
        """Queue every Model that has adapters (and those that had them at the last look)."""
        keys = {a.model_key for a in await self._store.list_adapters()} | self._with_adapters
        self._with_adapters |= keys
        for key in sorted(keys):
            self.queue.add(key)

    async def _reconcile(self, key: str) -> None:
        if await self.reconciler.reconcile(key):
            self._with_adapters.add(key)
        else:
            self._with_adapters.discard(key)

    async def _resync_loop(self) -> None:
        while True:
            try:
                await self.resync()
            except FlexInferError as exc:
                log.warning("adapter resync failed: %s", exc)
            await asyncio.sleep(self._resync_interval_s)
