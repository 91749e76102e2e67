"""The event bus interface.

Semantics (both implementations pass ``tests/test_common_bus_contract.py``):

- ``publish`` appends a JSON object to a topic and returns its message id. Ids increase
  within a topic. A topic keeps at least its newest ``retention`` messages.
- Every consumer *group* sees every message published after the group was created
  (or, with ``from_start=True``, every retained message). Within a group each message is
  delivered to one consumer, which must ``ack`` it.
- A message fetched but not acked stays *pending* for its group. ``reclaim`` hands pending
  messages idle for at least ``min_idle_s`` to another consumer of the same group, so the
  work of a consumer that died is not lost. ``Message.deliveries`` counts the hand-outs.
- ``fetch`` waits up to ``timeout_s`` for at least one message, then returns what it has.
- ``ping`` raises BusError unless the bus answers within its timeout; ``healthy`` is the same
  check as a bool, cheap enough for every /readyz probe.

Broadcast (every replica of a service sees every event) is a group per replica; work
sharing (one replica handles each event) is one group shared by the replicas.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from flexinfer_common.errors import FlexInferError

HEALTH_TIMEOUT_S = 1.0
"""How long ``healthy`` waits for an answer: Kubernetes' default probe timeout is 1 s, and a
bus slower than that to answer a ping cannot carry demand or endpoint events either."""


@dataclass(frozen=True, slots=True)
class Message:
    """One event as delivered to a consumer."""

    id: str
    topic: str
    payload: dict[str, Any]
    deliveries: int = 1


class Consumer(ABC):
    """One named consumer within a consumer group of one topic."""

    @abstractmethod
    async def fetch(self, max_count: int = 100, timeout_s: float = 1.0) -> list[Message]:
        """New messages for this group, waiting up to ``timeout_s`` for the first."""

    @abstractmethod
    async def ack(self, *ids: str) -> None:
        """Mark messages as handled so they are never delivered again to this group."""

    @abstractmethod
    async def reclaim(self, min_idle_s: float, max_count: int = 100) -> list[Message]:
        """Take over this group's pending messages that no consumer acked for ``min_idle_s``."""


class EventBus(ABC):
    """Topics of JSON events with consumer groups; see the module docstring."""

    @abstractmethod
    async def publish(self, topic: str, payload: Mapping[str, Any]) -> str:
        """Append ``payload`` to ``topic``; return the message id."""

    @abstractmethod
    def consumer(self, topic: str, group: str, name: str, *, from_start: bool = False) -> Consumer:
        """A consumer named ``name`` in ``group`` (created on first use) of ``topic``."""

    @abstractmethod
    async def ping(self, timeout_s: float = HEALTH_TIMEOUT_S) -> None:
        """Return once the bus answered, within ``timeout_s``: BusError if it is unreachable
        or closed, ConfigError if it refuses this client (bad credentials, unknown database)."""

    async def healthy(self, timeout_s: float = HEALTH_TIMEOUT_S) -> bool:
        """True if the bus answers a ping within ``timeout_s`` (for /readyz)."""
        try:
            await self.ping(timeout_s)
        except FlexInferError:
            return False
        return True

    @abstractmethod
    async def close(self) -> None:
        """Release connections; pending fetches end."""

    @property
    @abstractmethod
    def closed(self) -> bool:
        """True once ``close`` ran: fetches then answer [] at once, so loops must stop."""


def validate_names(*names: Sequence[str] | str) -> None:
    """Reject empty names or names with characters that break stream keys."""
    for name in names:
        text = str(name)
        if not text or len(text) > 200 or any(c.isspace() or c == "\x00" for c in text):
            raise ValueError(f"invalid bus name {text!r}")
