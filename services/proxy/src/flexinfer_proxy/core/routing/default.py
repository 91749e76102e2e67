"""``default``: round-robin over a model's usable endpoints (the Service's behaviour)."""

from __future__ import annotations

from collections.abc import Sequence

from flexinfer_common.bus.topics import EndpointInfo
from flexinfer_proxy.core.routing.base import RouteContext, RoutingStrategy, StrategyDeps, Usable


class RoundRobin(RoutingStrategy):
    """Each request goes to the next usable endpoint in turn."""

    def __init__(self, deps: StrategyDeps | None = None) -> None:
        self._cursor: dict[str, int] = {}

    def pick(
        self, model: str, endpoints: Sequence[EndpointInfo], usable: Usable, ctx: RouteContext
    ) -> EndpointInfo | None:
        """The next usable endpoint after the model's cursor."""
        count = len(endpoints)
        start = self._cursor.get(model, 0)
        for step in range(count):
            index = (start + step) % count
            candidate = endpoints[index]
            if usable(candidate):
                self._cursor[model] = (index + 1) % count
                return candidate
        return None
