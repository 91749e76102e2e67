"""The Kubernetes model feed: the shared informers of Models, one per watched namespace."""

from __future__ import annotations

from flexinfer_common.kube.informer import Change
from flexinfer_controller.adapters.kube.objects import CustomListWatch
from flexinfer_controller.adapters.kube.resources import MODELS
from flexinfer_controller.adapters.kube.store import KubernetesModelStore
from flexinfer_controller.core.feed import Enqueue


class InformerFeed:
    """Every Model change the apiserver reports, as a reconcile of its key."""

    def __init__(self, store: KubernetesModelStore, namespaces: list[str | None]) -> None:
        self._store = store
        self._namespaces = namespaces

    async def run(self, enqueue: Enqueue) -> None:
        """Follow Models in every namespace until cancelled."""

        def changed(change: Change) -> None:
            enqueue(change.key)

        source = CustomListWatch(self._store.client, MODELS)
        await self._store.informers.run_all([(source, ns) for ns in self._namespaces], changed)
