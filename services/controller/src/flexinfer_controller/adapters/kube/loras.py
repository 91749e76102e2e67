"""LoRAAdapters on Kubernetes: informers of them, as the admin API's AdapterFeed.

An adapter applied with kubectl reaches the controller only through these informers. The
informer's callback is synchronous and forgets a deleted object before it reports it, so
the feed keeps the last adapter of every key (the deleted event names its base Model) and
hands changes, in order, to one task that awaits the service.
"""

from __future__ import annotations

import asyncio
import logging

from flexinfer_common.api import LoRAAdapter
from flexinfer_common.errors import FlexInferError
from flexinfer_common.kube.client import Obj
from flexinfer_common.kube.informer import Change, Informer
from flexinfer_controller.adapters.kube.convert import from_object
from flexinfer_controller.adapters.kube.store import KubernetesModelStore
from flexinfer_controller.core.adapters import AdapterChanged

log = logging.getLogger(__name__)


class AdapterInformerFeed:
    """Every LoRAAdapter change the apiserver reports, as (adapter, deleted)."""

    def __init__(self, store: KubernetesModelStore, namespaces: list[str | None]) -> None:
        self._store = store
        self._namespaces = namespaces
        self.informers: list[Informer[Obj]] = []

    async def run(self, changed: AdapterChanged) -> None:
        """List and watch LoRAAdapters in every namespace until cancelled."""
        queue: asyncio.Queue[tuple[LoRAAdapter, bool]] = asyncio.Queue()
        last: dict[str, LoRAAdapter] = {}

        def on_change(change: Change) -> None:
            if change.type == "DELETED":
                gone = last.pop(change.key, None)
                if gone is not None:
                    queue.put_nowait((gone, True))
                return
            found = self._cached(change.key)
            if found is None:
                return
            try:
                adapter = from_object(LoRAAdapter, found)
            except FlexInferError as exc:  # the CRD schema let through what we cannot read
                log.warning("ignoring loraadapter %s: %s", change.key, exc)
                return
            last[change.key] = adapter
            queue.put_nowait((adapter, False))

        self.informers = [self._store.adapter_informer(on_change, ns) for ns in self._namespaces]
        async with asyncio.TaskGroup() as tasks:
            for informer in self.informers:
                tasks.create_task(informer.run())
            tasks.create_task(_deliver(queue, changed))

    def _cached(self, key: str) -> Obj | None:
        # Namespaces do not overlap: at most one informer holds the key.
        for informer in self.informers:
            found = informer.get(key)
            if found is not None:
                return found
        return None


async def _deliver(queue: asyncio.Queue[tuple[LoRAAdapter, bool]], changed: AdapterChanged) -> None:
    """Hand queued changes to ``changed`` one at a time; a failure skips one change."""
    while True:
        adapter, deleted = await queue.get()
        try:
            await changed(adapter, deleted)
        except FlexInferError as exc:  # the apiserver was unreachable: the next event retries
            log.warning("loraadapter %s change not handled: %s", adapter.key, exc)
