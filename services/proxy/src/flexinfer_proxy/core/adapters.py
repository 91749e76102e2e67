"""Requests for a LoRA adapter: routed only to replicas that hold it.

The controller says, per endpoint, which adapters its engine holds
(``EndpointInfo.adapters``), so a replica that has just become ready but has not been
given its adapters yet is not chosen for them. While no endpoint holds an adapter, its
requests wait in the cold-start queue ``<namespace>/<model>:<adapterName>``, whose demand
names the adapter (the controller starts the Model and loads it there), and they go on
once an endpoint event or the adapter's status says that one can take them.
"""

from __future__ import annotations

from flexinfer_common.api import LoRAAdapter, LoRAAdapterPhase
from flexinfer_common.bus.topics import EndpointInfo
from flexinfer_proxy.core.catalog import ModelCatalog, adapter_queue
from flexinfer_proxy.core.endpoints import EndpointTable, Serves, serving_adapter
from flexinfer_proxy.core.queue import ColdStartQueue
from flexinfer_proxy.core.routing.base import RouteContext, RoutingStrategy


def serves(adapter: LoRAAdapter) -> Serves:
    """The endpoints that take ``adapter``'s requests now."""
    loaded = adapter.status.phase is LoRAAdapterPhase.LOADED
    return serving_adapter(adapter.spec.adapter_name, loaded)


class AdapterRouting:
    """Picks an adapter's endpoint, and wakes its waiters when one may take them."""

    def __init__(self, table: EndpointTable, queue: ColdStartQueue, catalog: ModelCatalog) -> None:
        self._table = table
        self._queue = queue
        self._catalog = catalog

    def pick(
        self, adapter: LoRAAdapter, strategy: RoutingStrategy, ctx: RouteContext
    ) -> EndpointInfo | None:
        """An endpoint of the base Model that holds ``adapter``, unless earlier requests
        for it still wait (FIFO: a newcomer does not overtake them)."""
        if self._queue.depth(adapter_queue(adapter)):
            return None
        return self._table.pick(adapter.model_key, strategy, ctx, serves(adapter))

    def wake(self, model: str) -> None:
        """The endpoints of ``model`` changed: release the waiters of each of its adapters
        that an endpoint can take now."""
        for adapter in self._catalog.adapters:
            if adapter.model_key == model:
                self.wake_one(adapter)

    def wake_one(self, adapter: LoRAAdapter) -> None:
        """Release ``adapter``'s waiters if an endpoint can take them now."""
        key = adapter_queue(adapter)
        if self._queue.depth(key) and self._table.serving(adapter.model_key, serves(adapter)):
            self._queue.release(key)
