"""The node cache: each node's placement facts, parsed once when the node changes.

kube-scheduler's ``nodeCacheCapable`` mode sends node names only; the facts then come from
here, kept current by the Kubernetes node informer (``adapters.kube``) or filled directly
(tests, benchmarks). Writes come from one task; readers see a consistent dict entry.
"""

from __future__ import annotations

from collections.abc import Iterable

from flexinfer_common.placement.facts import NodeFacts


class NodeCache:
    """Node name -> facts."""

    def __init__(self, nodes: Iterable[NodeFacts] = ()) -> None:
        self._nodes = {node.name: node for node in nodes}

    def get(self, name: str) -> NodeFacts | None:
        """The node's facts; None if the cache has not seen it."""
        return self._nodes.get(name)

    def split(self, names: list[str]) -> tuple[list[NodeFacts], list[str]]:
        """The facts of the names the cache knows, and the names it does not."""
        nodes = self._nodes
        found = [nodes.get(name) for name in names]
        known = [node for node in found if node is not None]
        if len(known) == len(found):
            return known, []
        return known, [name for name in names if name not in nodes]

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
