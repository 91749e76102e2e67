"""Strategy names -> factories, and the per-model choice by annotation."""

from __future__ import annotations

import logging
from collections.abc import Callable

from flexinfer_common.api import Model
from flexinfer_proxy.core.routing.base import RoutingStrategy, StrategyDeps
from flexinfer_proxy.core.routing.default import RoundRobin
from flexinfer_proxy.core.routing.hashed import PrefixRouting, SessionAffinity
from flexinfer_proxy.core.routing.least_loaded import LeastLoaded

log = logging.getLogger(__name__)

ROUTING_ANNOTATION = "flexinfer.ai/routing"
DEFAULT = "default"

StrategyFactory = Callable[[StrategyDeps], RoutingStrategy]


def builtin_strategies() -> dict[str, StrategyFactory]:
    """The strategies the operator documents, by annotation value."""
    return {
        DEFAULT: RoundRobin,
        "session-affinity": SessionAffinity,
        "prefix": PrefixRouting,
        "least-loaded": LeastLoaded,
    }


class Router:
    """One instance of each strategy; picks the one a model's annotation names."""

    def __init__(
        self, deps: StrategyDeps, factories: dict[str, StrategyFactory] | None = None
    ) -> None:
        self.strategies = {
            name: factory(deps) for name, factory in (factories or builtin_strategies()).items()
        }
        self._warned: set[str] = set()

    def strategy_name(self, model: Model) -> str:
        """The strategy for ``model``: its annotation, or default when unset or unknown."""
        name = model.metadata.annotations.get(ROUTING_ANNOTATION, DEFAULT).strip() or DEFAULT
        if name not in self.strategies:
            if name not in self._warned:
                self._warned.add(name)
                log.warning("%s: unknown routing %r, using default", model.key, name)
            return DEFAULT
        return name

    def for_model(self, model: Model) -> RoutingStrategy:
        """The strategy instance routing ``model``."""
        return self.strategies[self.strategy_name(model)]
