"""Selectors by name (MX_P2P_SOURCE_SELECTOR); an unknown name falls back to random."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from flexinfer_transfer.load_aware_selector import LoadAwareSelector
from flexinfer_transfer.random_selector import RandomSelector
from flexinfer_transfer.rendezvous_selector import RendezvousSelector
from flexinfer_transfer.selector import SourceSelector

log = logging.getLogger(__name__)

SelectorFactory = Callable[[], SourceSelector]
DEFAULT_SELECTOR = RandomSelector.name


def default_selectors() -> dict[str, SelectorFactory]:
    """The shipped selectors, by name (a fresh dict: callers may extend it)."""
    return {
        RandomSelector.name: RandomSelector,
        RendezvousSelector.name: RendezvousSelector,
        LoadAwareSelector.name: LoadAwareSelector,
    }


def create_selector(
    name: str, registry: Mapping[str, SelectorFactory] | None = None
) -> SourceSelector:
    """The selector called ``name``; random (with a warning) when there is none."""
    factories = default_selectors() if registry is None else registry
    factory = factories.get(name.strip().lower())
    if factory is None:
        log.warning(
            "unknown source selector %r, using %s",
            name,
            DEFAULT_SELECTOR,
            extra={"selector": name, "fallback": DEFAULT_SELECTOR},
        )
        return RandomSelector()
    return factory()
