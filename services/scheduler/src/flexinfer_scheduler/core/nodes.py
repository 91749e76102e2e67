"""Where node names resolve to placement facts, parsed once when a node changes.

kube-scheduler's ``nodeCacheCapable`` mode sends node names only; the facts then come from
a ``NodeLookup``: on Kubernetes the node informer's cache (``adapters.kube``), otherwise a
``NodeCache`` filled directly (tests, the local runtime). Writes come from one task;
readers see a consistent dict entry.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol

from flexinfer_common.placement.facts import NodeFacts


class NodeLookup(Protocol):
    """Node names -> facts."""

    def split(self, names: list[str]) -> tuple[list[NodeFacts], list[str]]:
        """The facts of the names known, and the names not known."""


def split_known(
    nodes: Mapping[str, NodeFacts], names: list[str]
) -> tuple[list[NodeFacts], list[str]]:
    """The facts of the names ``nodes`` has, and the names it lacks."""
    found = list(map(nodes.get, names))
    known: list[NodeFacts] = list(filter(None, found))  # facts are never falsy
    if len(known) == len(found):
        return known, []
    return known, [name for name, node in zip(names, found, strict=True) if node is None]


class NodeCache:
    """Node name -> facts."""

    def __init__(self, nodes: Iterable[NodeFacts] = ()) -> None:
        self._nodes = {node.name: node for node in nodes}

    def get(self, name: str) -> NodeFacts | None:
        """The node's facts; None if the cache has not seen it."""
        return self._nodes.get(name)

    def split(self, names: list[str]) -> tuple[list[NodeFacts], list[str]]:
        """The facts of the names the cache knows, and the names it does not."""
        return split_known(self._nodes, names)

    def upsert(self, node: NodeFacts) -> None:
        """Add or replace a node."""
        self._nodes[node.name] = node

    def remove(self, name: str) -> None:
        """Forget a node (deleted); unknown names are ignored."""
        self._nodes.pop(name, None)

    def replace(self, nodes: Iterable[NodeFacts]) -> None:
        """Swap in a full listing at once (after a list call)."""
        self._nodes = {node.name: node for node in nodes}

    def __len__(self) -> int:
        return len(self._nodes)
