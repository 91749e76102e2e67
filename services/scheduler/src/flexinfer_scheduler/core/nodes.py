"""Where node names resolve to placement facts, laid out once when a node changes.

kube-scheduler's ``nodeCacheCapable`` mode sends node names only; the facts then come from
a ``NodeLookup``'s columns (``flexinfer_common.placement.NodeColumns``): on Kubernetes the
node informer's, kept by its change events (``adapters.kube``), otherwise a ``NodeCache``
filled directly (tests, a scheduler without Kubernetes). Writes come from tasks of the
event loop that answers requests, so a request that reads rows and decides without
awaiting sees one consistent state.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from flexinfer_common.placement import NodeColumns, NodeFacts


class NodeLookup(Protocol):
    """Node names -> facts, as columns."""

    @property
    def columns(self) -> NodeColumns:
        """The nodes known, one row each."""


class NodeCache:
    """Node name -> facts, filled directly."""

    def __init__(self, nodes: Iterable[NodeFacts] = ()) -> None:
        self._columns = NodeColumns(nodes)

    @property
    def columns(self) -> NodeColumns:
        """The nodes held, one row each."""
        return self._columns

    def get(self, name: str) -> NodeFacts | None:
        """The node's facts; None if the cache has not seen it."""
        return self._columns.get(name)

    def upsert(self, node: NodeFacts) -> None:
        """Add or replace a node."""
        self._columns.upsert(node)

    def remove(self, name: str) -> None:
        """Forget a node (deleted); unknown names are ignored."""
        self._columns.remove(name)

    def replace(self, nodes: Iterable[NodeFacts]) -> None:
        """Swap in a full listing at once (after a list call)."""
        self._columns.replace(nodes)

    def __len__(self) -> int:
        return len(self._columns)
