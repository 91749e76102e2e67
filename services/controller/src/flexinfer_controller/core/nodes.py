"""The nodes node agents report on the bus: their GPUs join the fleet while they beat.

In local mode the agent publishes a ``NodeInventoryEvent`` (``flexinfer.nodes``) every
heartbeat instead of labelling a Node. ``ReportedNodes`` keeps each node's newest event;
``FleetInventory`` puts the reported nodes beside the runtime's own fleet (the declared
GPUs locally, the labelled Nodes on Kubernetes), a reported node replacing a declared or
labelled one of the same name: the agent saw the hardware, a declaration only says it.

A node whose heartbeats stop is gone after ``STALE_HEARTBEATS`` of its own intervals
(``interval_s`` travels in each event), timed from the older of when the agent sent the
heartbeat and when it arrived, so neither a heartbeat replayed from the bus's history nor
an agent's clock running ahead keeps a dead node in the fleet.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from flexinfer_common.bus.topics import NodeInventoryEvent
from flexinfer_controller.core.gpu import GPUInventory, NodeGPU, parse_vram_mb

STALE_HEARTBEATS = 3.0
"""Missed heartbeats after which a node has gone (the agent's event says "a few")."""


@dataclass(frozen=True, slots=True)
class _Seen:
    event: NodeInventoryEvent
    since: float
    """Wall-clock seconds its freshness counts from."""

    def fresh(self, now: float) -> bool:
        return now - self.since <= self.event.interval_s * STALE_HEARTBEATS


def node_gpus(event: NodeInventoryEvent) -> list[NodeGPU]:
    """The reported node's GPUs, one entry per group, numbered on per vendor in order."""
    found: list[NodeGPU] = []
    used: dict[str, int] = {}
    for group in event.gpus:
        first = used.get(group.vendor, 0)
        used[group.vendor] = first + group.count
        found.append(
            NodeGPU(
                node=event.node,
                vendor=group.vendor,
                count=group.count,
                arch=group.arch.lower() if group.arch else None,
                vram_mb=parse_vram_mb(group.vram) if group.vram else None,
                indices=tuple(range(first, first + group.count)),
                labels=dict(event.labels),
                annotations=dict(event.annotations),
            )
        )
    return found


class ReportedNodes:
    """Each reporting node's newest heartbeat."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._seen: dict[str, _Seen] = {}

    def observe(self, event: NodeInventoryEvent) -> bool:
        """Take a heartbeat (an older one than held is ignored); True when the GPUs
        placement sees changed: a node joined, came back, or reports other GPUs."""
        now = self._clock()
        held = self._seen.get(event.node)
        if held is not None and event.at <= held.event.at:
            return False
        seen = _Seen(event, min(event.at.timestamp(), now))
        self._seen[event.node] = seen
        if not seen.fresh(now):
            return False  # a heartbeat from the bus's history of a node long gone
        if held is None or not held.fresh(now):
            return bool(event.gpus)
        return node_gpus(held.event) != node_gpus(event)

    def nodes(self) -> list[NodeGPU]:
        """The GPUs of the nodes whose heartbeats are fresh, by node name."""
        now = self._clock()
        fresh = [seen.event for seen in self._seen.values() if seen.fresh(now)]
        return [gpu for event in sorted(fresh, key=lambda e: e.node) for gpu in node_gpus(event)]

    def forget_stale(self) -> list[str]:
        """Drop the nodes that stopped beating; their names."""
        now = self._clock()
        stale = [name for name, seen in self._seen.items() if not seen.fresh(now)]
        for name in stale:
            del self._seen[name]
        return stale


class FleetInventory:
    """The runtime's fleet with the reported nodes beside (and over) it."""

    def __init__(self, base: GPUInventory, reported: ReportedNodes) -> None:
        self._base = base
        self._reported = reported

    def nodes(self) -> list[NodeGPU] | None:
        """The base fleet's nodes that no agent reports, then the reported ones; None
        while the base fleet is unknown (the cluster's scheduler places then)."""
        base = self._base.nodes()
        if base is None:
            return None
        reported = self._reported.nodes()
        names = {gpu.node for gpu in reported}
        return [gpu for gpu in base if gpu.node not in names] + reported
