"""``least-loaded``: the usable endpoint with the fewest requests in flight."""

from __future__ import annotations

from collections.abc import Sequence

from flexinfer_common.bus.topics import EndpointInfo
from flexinfer_proxy.core.routing.base import RouteContext, RoutingStrategy, StrategyDeps, Usable


class LeastLoaded(RoutingStrategy):
    """Fewest active connections; ties rotate so idle endpoints share the work."""

    def __init__(self, deps: StrategyDeps) -> None:
        self._loads = deps.loads
        self._turn = 0

    def pick(
        self, model: str, endpoints: Sequence[EndpointInfo], usable: Usable, ctx: RouteContext
    ) -> EndpointInfo | None:
        """The least loaded usable endpoint."""
        best: EndpointInfo | None = None
        best_load = 0
        count = len(endpoints)
        self._turn += 1
        for step in range(count):
            candidate = endpoints[(self._turn + step) % count]
            if not usable(candidate):
                continue
            load = self._loads.load(candidate.url)
            if best is None or load < best_load:
                best, best_load = candidate, load
        return best
