"""The Kubernetes model feed: informers of Models, one per watched namespace."""

from __future__ import annotations

import asyncio

from flexinfer_common.kube.informer import Change
from flexinfer_controller.adapters.kube.store import KubernetesModelStore
from flexinfer_controller.core.feed import Enqueue


class InformerFeed:
    """Every Model change the apiserver reports, as a reconcile of its key."""

    def __init__(
        self, store: KubernetesModelStore, namespaces: list[str | None], watch_timeout_s: int
    ) -> None:
        self._store = store
        self._namespaces = namespaces
        self._watch_timeout_s = watch_timeout_s

    async def run(self, enqueue: Enqueue) -> None:
        """List and watch Models in every namespace until cancelled."""

        def changed(change: Change) -> None:
            enqueue(change.key)

        informers = [
            self._store.model_informer(changed, namespace, self._watch_timeout_s)
            for namespace in self._namespaces
        ]
        await asyncio.gather(*(informer.run() for informer in informers))
