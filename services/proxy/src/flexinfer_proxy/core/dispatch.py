"""Pick an endpoint for a request, waiting in the cold-start queue when none is ready."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from flexinfer_common.api import Model
from flexinfer_common.bus.topics import EndpointInfo
from flexinfer_proxy.core.endpoints import EndpointTable
from flexinfer_proxy.core.queue import ColdStartQueue
from flexinfer_proxy.core.routing.base import RouteContext, RoutingStrategy


def wait_budget(model: Model, queue_timeout_s: float, cold_start_timeout_s: float) -> float:
    """Seconds a request may wait for ``model``: its spec.serverless.coldStartTimeout as
    given, else the longer of the proxy's two timeouts (the seed's max)."""
    declared = model.spec.serverless_or_default.cold_start_timeout
    if declared is not None:
        return declared.total_seconds()
    return max(queue_timeout_s, cold_start_timeout_s)


class Dispatcher:
    """Round-robin over ready endpoints; queue (and demand) when there are none."""

    def __init__(
        self,
        table: EndpointTable,
        queue: ColdStartQueue,
        on_available: Callable[[str], None] | None = None,
    ) -> None:
        self.table = table
        self.queue = queue
        self._on_available = on_available
        """Also told when a model's endpoints may be usable (its adapters' waiters)."""

    def pick_now(
        self,
        model: str,
        strategy: RoutingStrategy | None = None,
        ctx: RouteContext | None = None,
    ) -> EndpointInfo | None:
        """A ready endpoint without waiting, unless earlier requests are still queued
        (FIFO: a newcomer must not overtake requests waiting for the same model)."""
        if self.queue.depth(model):
            return None
        return self.table.pick(model, strategy, ctx)

    async def acquire(
        self,
        model: str,
        label: str,
        deadline: float,
        waited_from: float,
        strategy: RoutingStrategy | None = None,
        ctx: RouteContext | None = None,
    ) -> EndpointInfo:
        """An endpoint for ``model``, waiting in the queue until ``deadline`` if needed."""
        endpoint = self.pick_now(model, strategy, ctx)
        while endpoint is None:
            await self.queue.wait(model, label, deadline, waited_from)
            endpoint = self.table.pick(model, strategy, ctx)
        return endpoint

    def endpoint_failed(self, model: str, url: str) -> None:
        """``url`` refused a connection: skip it, and retry waiters when it cools down."""
        delay = self.table.mark_out(model, url)
        loop = asyncio.get_running_loop()
        loop.call_later(delay, self.available, model)

    def available(self, model: str) -> None:
        """Endpoints of ``model`` may be usable now: wake its waiters in order."""
        if self.table.usable(model):
            self.queue.release(model)
        if self._on_available is not None:
            self._on_available(model)
