"""Local mode: each heartbeat published on the bus as a ``NodeInventoryEvent``.

The topic is ``flexinfer.nodes`` (``flexinfer_common.bus.topics.NODES``); the payload is the
event's ``model_dump(mode="json")``, as every bus payload. See docs/architecture.md.
"""

from __future__ import annotations

from flexinfer_agent.core.heartbeat import NodeSnapshot
from flexinfer_common.bus import EventBus
from flexinfer_common.bus.topics import NODES


class BusReporter:
    """Publishes each heartbeat for the controller's local runtime."""

    def __init__(self, bus: EventBus, interval_s: float) -> None:
        self._bus = bus
        self._interval_s = interval_s

    async def report(self, snapshot: NodeSnapshot) -> None:
        """Publish the snapshot's event."""
        await self._bus.publish(NODES, snapshot.event(self._interval_s).model_dump(mode="json"))
