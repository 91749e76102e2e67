"""One heartbeat: discover, describe the node, report it; then again every interval.

Where a heartbeat goes is a ``Reporter`` (the Node's labels on Kubernetes, the bus in local
mode, nowhere). A reporter that fails (apiserver down, bus gone) is logged and counted, and
the next heartbeat tries again: the agent never stops over it.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from flexinfer_agent.core.discovery import Discovery, Inventory
from flexinfer_agent.core.gpu import GPU
from flexinfer_agent.core.labels import NodeKeys, labelled_gpus, node_keys, vram_quantity
from flexinfer_common.bus.topics import NodeGPUGroup, NodeInventoryEvent
from flexinfer_common.errors import FlexInferError

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class NodeSnapshot:
    """One heartbeat's view of the node."""

    node: str
    at: datetime
    inventory: Inventory
    keys: NodeKeys

    def event(self, interval_s: float) -> NodeInventoryEvent:
        """The bus event of this snapshot."""
        return NodeInventoryEvent(
            node=self.node,
            at=self.at,
            interval_s=interval_s,
            source=self.inventory.source,
            gpus=gpu_groups(labelled_gpus(self.inventory.gpus)),
            labels=self.keys.labels,
            annotations=self.keys.annotations,
        )

    def as_json(self) -> dict[str, Any]:
        """What ``--once --print`` shows: every GPU, the failures, the node keys."""
        return {
            "node": self.node,
            "source": self.inventory.source,
            "gpus": [gpu_json(gpu) for gpu in self.inventory.gpus],
            "errors": [
                {"source": e.source, "reason": e.reason, "message": e.message}
                for e in self.inventory.errors
            ],
            "labels": self.keys.labels,
            "annotations": self.keys.annotations,
        }


def gpu_json(gpu: GPU) -> dict[str, Any]:
    """One GPU as JSON, derived fields included."""
    return {
        "index": gpu.index,
        "vendor": gpu.vendor.value,
        "name": gpu.name,
        "uuid": gpu.uuid,
        "arch": gpu.arch,
        "device_class": gpu.device_class,
        "int4": gpu.int4,
        "memory_total_mib": gpu.memory_total_mib,
        "memory_free_mib": gpu.memory_free_mib,
        "mig_profile": gpu.mig_profile,
    }


def gpu_groups(gpus: list[GPU]) -> list[NodeGPUGroup]:
    """The GPUs grouped by device class, in the order they were found."""
    counts = Counter(gpu.device_class for gpu in gpus)
    groups = []
    for device_class in counts:
        members = [gpu for gpu in gpus if gpu.device_class == device_class]
        first = members[0]
        sizes = [g.memory_total_mib for g in members if g.memory_total_mib is not None]
        free = [g.memory_free_mib for g in members if g.memory_free_mib is not None]
        group = {
            "vendor": first.vendor.value.lower(),
            "count": len(members),
            "arch": first.arch,
            "vram": vram_quantity(min(sizes)) if sizes else None,
            "device_class": device_class,
            "int4": first.int4,
            "free_mib": sum(free) if free else None,
        }
        groups.append(NodeGPUGroup.model_validate(group))
    return groups


class Reporter(Protocol):
    """Where heartbeats go."""

    async def report(self, snapshot: NodeSnapshot) -> None:
        """Publish ``snapshot``; FlexInferError or OSError when it could not."""
        ...


class HeartbeatObserver(Protocol):
    """What watches heartbeats (the /metrics gauges)."""

    def observed(self, snapshot: NodeSnapshot) -> None:
        """A heartbeat discovered ``snapshot``."""
        ...

    def report_failed(self) -> None:
        """The reporter could not deliver a heartbeat."""
        ...


class NoReporter:
    """Heartbeats stay in /metrics (``FLEXINFER_AGENT_REPORT=none``)."""

    async def report(self, snapshot: NodeSnapshot) -> None:
        """Nothing."""


class Heartbeat:
    """Discovers and reports the node once per ``interval_s``."""

    def __init__(
        self,
        *,
        node: str,
        prefix: str,
        discovery: Discovery,
        reporter: Reporter,
        observer: HeartbeatObserver,
        interval_s: float,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._node, self._prefix = node, prefix
        self._discovery, self._reporter, self._observer = discovery, reporter, observer
        self.interval_s = interval_s
        self._clock = clock
        self.last: NodeSnapshot | None = None

    async def discover(self) -> NodeSnapshot:
        """This node now (nothing reported)."""
        inventory = await self._discovery.run()
        keys = node_keys(inventory.gpus, self._prefix)
        return NodeSnapshot(self._node, self._clock(), inventory, keys)

    async def beat(self) -> NodeSnapshot:
        """One heartbeat: discover, observe, report (a failed report is logged)."""
        snapshot = await self.discover()
        self.last = snapshot
        self._observer.observed(snapshot)
        try:
            await self._reporter.report(snapshot)
        except (FlexInferError, OSError) as exc:
            self._observer.report_failed()
            log.warning("heartbeat of node %s not delivered: %s", self._node, exc)
        return snapshot

    async def run(self) -> None:
        """Beat now and then every interval, until cancelled."""
        while True:
            await self.beat()
            await asyncio.sleep(self.interval_s)
