"""The event bus: topics of JSON events, consumer groups, acks and reclaim.

``EventBus`` is the interface; ``memory.MemoryBus`` and ``redis.RedisBus`` implement it and
pass the same contract suite. ``create_bus(settings)`` picks one from the URL scheme,
``open_bus(settings)`` also waits until it answers (what a starting service calls), and
``consume`` is the fetch-handle-ack loop every service runs per consumer.
"""

from flexinfer_common.bus.base import Consumer, EventBus, Message
from flexinfer_common.bus.consume import BatchHandler, consume
from flexinfer_common.bus.factory import create_bus, open_bus
from flexinfer_common.bus.settings import BusClientSettings

__all__ = [
    "BatchHandler",
    "BusClientSettings",
    "Consumer",
    "EventBus",
    "Message",
    "consume",
    "create_bus",
    "open_bus",
]
