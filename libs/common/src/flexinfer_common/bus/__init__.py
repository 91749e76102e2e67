"""The event bus: topics of JSON events, consumer groups, acks and reclaim.

``EventBus`` is the interface; ``memory.MemoryBus`` and ``redis.RedisBus`` implement it and
pass the same contract suite. ``create_bus(settings)`` picks one from the URL scheme.
"""

from flexinfer_common.bus.base import Consumer, EventBus, Message
from flexinfer_common.bus.factory import create_bus

__all__ = ["Consumer", "EventBus", "Message", "create_bus"]
