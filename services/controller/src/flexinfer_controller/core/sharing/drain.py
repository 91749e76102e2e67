"""Drain an engine before it stops: no completion is cut off for a swap, a scale-in or a
rollout.

When the shared-GPU hook holds a Model back with a drain grace (a Preempted verdict's
``drain_s``), the reconcile does not stop its ready engines at once. It withdraws their
endpoints in the same pass (the proxies stop routing to them; new requests for the Model
queue in the proxy), and stops each engine once it runs no request, read from the engine's
own metrics, or once the grace has passed. The reconcile never waits for it: the drain is
a state kept here, looked at again every ``poll_s`` through the work queue. The engine
holds its GPU until it exits, so the winner is placed, and starts, only then.

Every other stop of a ready engine drains the same way, for the controller's
``drain_grace_s``: a scale-in, a replica replaced by a rollout, a scale to zero, an unload.
Nothing waits for its GPU there, and a long completion stream is not cut off at the
runtime's stop grace.

A replica that is still starting serves nothing and stops at once; so does every engine of
a backend without a metrics page. In a swap, an engine whose page cannot be read now is
given the benefit of the doubt until its grace passes; any other stop of it is at once
(the engine still gets the runtime's stop grace to finish after SIGTERM).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from flexinfer_controller.core.sharing.clock import Clock
from flexinfer_controller.core.sharing.hook import Hold, SharedVerdict
from flexinfer_controller.core.sharing.metrics import SwapMetrics
from flexinfer_controller.core.sharing.policy import DRAIN_POLL_S
from flexinfer_controller.runtime.base import Replica, ReplicaState

log = logging.getLogger(__name__)

IN_FLIGHT_METRICS = (
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "flexinfer_engine_num_requests_running",
    "flexinfer_engine_num_requests_waiting",
    "llamacpp:requests_processing",
    "llamacpp:requests_deferred",
)
"""Samples whose sum is the requests an engine holds: running and queued inside it."""
_SLACK_S = 0.01
"""Look just after a grace ends, so that the comparison sees it ended."""


class InFlight(Protocol):
    """Reads how many requests an engine holds (running or queued in it)."""

    async def requests_in_flight(self, url: str) -> int | None:
        """The count the metrics page ``url`` reports; None when it cannot be read now or
        reports none."""
        ...


@dataclass(slots=True)
class _Draining:
    model: str
    since: float


@dataclass(frozen=True, slots=True)
class DrainResult:
    """How one engine's drain ended: after ``seconds``, cut off at its grace or not."""

    model: str
    replica: str
    seconds: float
    timed_out: bool
    in_flight: int | None
    """What it held when it was stopped (None: unknown)."""


class Drainer:
    """Decides, each reconcile of a held Model, which of its engines stop now."""

    def __init__(
        self,
        *,
        in_flight: InFlight,
        clock: Clock,
        requeue: Callable[[str, float], object],
        metrics: SwapMetrics | None = None,
        poll_s: float = DRAIN_POLL_S,
        grace_s: float = 0.0,
        history: int = 256,
    ) -> None:
        self._in_flight = in_flight
        self._clock = clock
        self._requeue = requeue
        self._metrics = metrics
        self._poll_s = poll_s
        self._grace_s = grace_s
        """The drain of every stop that is not a swap's (0: those stop at once)."""
        self._draining: dict[str, _Draining] = {}
        """Replica id -> its drain."""
        self.results: deque[DrainResult] = deque(maxlen=history)
        """The latest drains, oldest first."""

    def draining(self, key: str) -> list[str]:
        """The replicas of Model ``key`` that drain now."""
        return sorted(rid for rid, d in self._draining.items() if d.model == key)

    async def hold_back(
        self,
        key: str,
        held: SharedVerdict | None,
        to_stop: Sequence[Replica],
        metrics_path: str | None,
    ) -> tuple[list[Replica], set[str]]:
        """Of ``to_stop`` (Model ``key``'s replicas the reconcile stops), those to stop
        now, and the ids of those that keep running to drain.

        ``held``: why the shared-GPU hook holds the Model back, whose grace bounds the
        drain (a swap). Any other stop (scale-in, a rollout, scale to zero) drains for
        ``grace_s``; 0 stops at once.
        """
        leaving = {r.id for r in to_stop}
        for rid in [r for r, d in self._draining.items() if d.model == key and r not in leaving]:
            del self._draining[rid]  # it got the GPU back, or its engine is gone
        grace = held.drain_s if held is not None else self._grace_s
        if held is None and (grace <= 0 or metrics_path is None):
            return list(to_stop), set()
        swap = held.group or "" if held is not None else None
        now_stop: list[Replica] = []
        draining: set[str] = set()
        for replica in to_stop:
            if not await self._drained(key, replica, grace, metrics_path, swap):
                draining.add(replica.id)
                continue
            now_stop.append(replica)
            if self._metrics is not None and held is not None and held.hold is Hold.PREEMPTED:
                self._metrics.stopping(held.group or "", replica.id)
        if draining:
            self._requeue(key, self._next_look(draining, grace))
        return now_stop, draining

    def _next_look(self, draining: set[str], grace_s: float) -> float:
        """The next poll, or the end of the first grace if that comes sooner: a drain is
        cut off at its grace, not up to a poll later."""
        now = self._clock.now()
        ends = [self._draining[rid].since + grace_s - now for rid in draining]
        return max(0.0, min(self._poll_s, *ends)) + _SLACK_S

    async def _drained(
        self,
        key: str,
        replica: Replica,
        grace_s: float,
        metrics_path: str | None,
        swap: str | None,
    ) -> bool:
        """Whether ``replica`` may stop now: it serves nothing, or its grace passed.
        ``swap``: the GPU group of the swap it drains for (None: no swap, no swap metrics)."""
        serving = replica.state is ReplicaState.READY and replica.url
        if grace_s <= 0 or not serving or metrics_path is None:
            return True
        now = self._clock.now()
        drain = self._draining.setdefault(replica.id, _Draining(key, now))
        took = now - drain.since
        url = f"{(replica.url or '').rstrip('/')}{metrics_path}"
        count = await self._in_flight.requests_in_flight(url)
        timed_out = took >= grace_s and count != 0
        # Only a swap waits out a page that cannot tell: any other stop would keep a GPU
        # for the whole grace on an engine that may well be hung.
        holding = count != 0 and (count is not None or swap is not None)
        if holding and not timed_out:
            return False
        del self._draining[replica.id]
        self.results.append(DrainResult(key, replica.id, took, timed_out, count))
        if timed_out:
            log.warning(
                "%s: replica %s still held %s request(s) after its %gs drain grace: stopping it",
                key,
                replica.id,
                "some" if count is None else count,
                grace_s,
            )
        if self._metrics is not None and swap is not None:
            self._metrics.drained(swap, took, timed_out=timed_out)
        return True

    def forget(self, key: str) -> None:
        """Model ``key`` is gone: its drains end."""
        for rid in self.draining(key):
            del self._draining[rid]
