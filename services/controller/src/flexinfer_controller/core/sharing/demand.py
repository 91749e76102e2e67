"""The DemandBook: how many requests wait for each Model, since when, and when it last
had any demand, fed by the proxies' DemandEvents and ActivityEvents.

A proxy sends a DemandEvent while requests wait in its queue for a Model (again when the
depth changes, or on its resend interval); it sends no "empty" event, so a queue entry
counts until that Model serves (an ActivityEvent), the proxy reports depth 0, or the
policy's demand window passes without the proxy repeating it. Times are the injected
clock's seconds at which the book heard of them, not the proxies' wall clocks.

On Kubernetes the proxies also write their queues on a GPUGroup (its ``flexinfer.ai/queue.*``
annotations), which the controller reads back through ``asserted``: such a queue counts only
while no proxy reports that Model on the bus, since both say the same thing (a controller
with the bus would count each request twice, one without it still sees the demand).
"""

from __future__ import annotations

from dataclasses import dataclass

from flexinfer_common.bus.topics import ActivityEvent, DemandEvent
from flexinfer_controller.core.sharing.clock import Clock


@dataclass(slots=True)
class _Entry:
    depth: int
    since: float
    """When this proxy's queue for the Model began (first heard non-empty)."""
    seen: float
    """When the proxy last reported it."""


@dataclass(frozen=True, slots=True)
class Queue:
    """The live demand for one Model: requests waiting over all proxies, since when."""

    depth: int
    since: float


class DemandBook:
    """Queue depth, queue-since and last demand per Model (``namespace/name``)."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._queues: dict[str, dict[str, _Entry]] = {}
        self._asserted: dict[str, _Entry] = {}
        self._last: dict[str, float] = {}

    def queued(self, model: str, depth: int, proxy: str) -> None:
        """``proxy`` holds ``depth`` requests for ``model`` now (0: its queue emptied)."""
        now = self._clock.now()
        self._last[model] = now
        entries = self._queues.setdefault(model, {})
        if depth <= 0:
            entries.pop(proxy, None)
            return
        entry = entries.get(proxy)
        if entry is None:
            entries[proxy] = _Entry(depth, now, now)
        else:
            entry.depth, entry.seen = depth, now

    def asserted(self, model: str, depth: int) -> None:
        """An apiserver object says ``depth`` requests wait for ``model`` now (0: none);
        repeat it while it stands, or it expires with the demand window as a proxy's does."""
        now = self._clock.now()
        self._last[model] = now
        entry = self._asserted.get(model)
        if depth <= 0:
            self._asserted.pop(model, None)
        elif entry is None:
            self._asserted[model] = _Entry(depth, now, now)
        else:
            entry.depth, entry.seen = depth, now

    def clear(self, model: str) -> None:
        """Drop the requests reported waiting for ``model`` so far (it was unloaded by hand:
        only demand reported after that brings it back)."""
        self._queues.pop(model, None)
        self._asserted.pop(model, None)

    def served(self, model: str) -> None:
        """``model`` served requests now: its queues drained (a proxy that still holds
        requests for it says so again)."""
        self._last[model] = self._clock.now()
        self._queues.pop(model, None)
        self._asserted.pop(model, None)

    def observe(self, event: DemandEvent | ActivityEvent, key: str) -> None:
        """Record a bus event about Model ``key`` (the event's model, namespaced)."""
        if isinstance(event, DemandEvent):
            self.queued(key, event.queue_depth, event.proxy)
        else:
            self.served(key)

    def queue(self, model: str, window_s: float) -> Queue | None:
        """The requests waiting for ``model`` that a proxy reported within ``window_s``."""
        now = self._clock.now()
        live = [e for e in self._queues.get(model, {}).values() if now - e.seen <= window_s]
        asserted = self._asserted.get(model)
        if not live and asserted is not None and now - asserted.seen <= window_s:
            live = [asserted]
        if not live:
            return None
        return Queue(sum(e.depth for e in live), min(e.since for e in live))

    def last_demand(self, model: str) -> float | None:
        """When ``model`` last had requests queued or served (None: never heard of)."""
        return self._last.get(model)

    def forget(self, model: str) -> None:
        """The Model is gone."""
        self._queues.pop(model, None)
        self._asserted.pop(model, None)
        self._last.pop(model, None)
