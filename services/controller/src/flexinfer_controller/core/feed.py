"""Model feeds: what tells the controller a Model changed, besides its own admin API.

With the SQL store the admin API (and the bus) trigger reconciles and nothing else writes
Models. On Kubernetes anyone may ``kubectl apply`` one, so informers of the apiserver
feed every change into the work queue, as the SQL store's change events do.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

Enqueue = Callable[[str], object]
"""Queues a reconcile of a namespace/name key."""


class ModelFeed(Protocol):
    """Reports changed Model keys until cancelled."""

    async def run(self, enqueue: Enqueue) -> None:
        """Call ``enqueue`` for every change; returns at once when there is nothing to watch."""


class NoFeed:
    """The SQL store's feed: its writers trigger reconciles themselves."""

    async def run(self, enqueue: Enqueue) -> None:
        """Nothing to watch."""
