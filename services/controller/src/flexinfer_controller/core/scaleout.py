"""Scale out by concurrency: how many replicas, between the idle rule's count and maxReplicas.

The signal is the requests each ready engine holds, running or queued inside it, read from
the engine's own metrics page (``vllm:num_requests_running`` + ``..._waiting``, our
engine's ``flexinfer_engine_num_requests_*``; the gauges the drain reads). Chosen over a
count the proxies send on the bus because:

- every request reaches an engine, whichever proxy replica (or client inside the cluster)
  sent it, so there is nothing to sum across proxies or to expire when one goes away;
- a reading is a level, not an event: a lost or late bus message cannot make it wrong,
  and a controller that restarts has a correct reading at its next look;
- the proxy routes to ready engines without holding requests back, so while one replica
  serves, the engines' running + waiting is the Model's whole in-flight load. With none
  ready, requests wait in the proxy's queue; the DemandEvent starts the first replica, as
  before, and this rule takes over once it serves.

A backend without a metrics page (or whose page has none of these gauges) gives no
reading and so never scales out: its replicas stay at the idle rule's count. A stable
window without a reading holds the count the Model has (its stored desiredReplicas)
rather than reading as no load: pages that cannot be read for a while, say on an
overloaded node, must not scale a busy Model down.

The decision follows Knative's KPA. Each look (at most every ``tick_s``) sums the engines'
in-flight requests into a window. The recommendation is ceil(average / target) over the
stable window (60 s); a burst that asks for ``panic_threshold`` times the ready replicas
over the short panic window (6 s) enters panic mode, where the short window decides and
nothing scales down until a stable window has passed without one. Scaling up is immediate;
the count goes down only once every recommendation of the last ``scale_down_delay_s``
was lower, so a load that wavers around a boundary does not flap. The result is clamped to
[the idle rule's count, maxReplicas]: a Model the idle rule scales to zero goes to zero.

The window lives in the controller's memory, as Knative's autoscaler's does; a controller
that starts anew seeds it with the Model's stored desired count, so a restart never
scales a busy Model down before a whole delay of readings says so.
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from flexinfer_common.api import ModelSpec
from flexinfer_common.api.status import AutoscalingStatus

if TYPE_CHECKING:  # the settings import this module, and the drain imports the settings
    from flexinfer_controller.core.sharing.drain import InFlight

_EPSILON = 1e-9
"""An average of exactly N x target asks for N replicas, not N+1 after float error."""


@dataclass(frozen=True, slots=True)
class ScaleOutPolicy:
    """The decision's windows and thresholds, in seconds (see ``ScaleOutSettings``)."""

    tick_s: float = 2.0
    stable_window_s: float = 60.0
    panic_window_s: float = 6.0
    panic_threshold: float = 2.0
    scale_down_delay_s: float = 30.0


@dataclass(frozen=True, slots=True)
class Decision:
    """The replica count the concurrency asks for, and why."""

    replicas: int
    recommended: int
    concurrency: float | None
    """The stable window's average in-flight requests (None: no reading in it)."""
    panic: bool
    reason: str
    message: str


@dataclass(slots=True)
class _State:
    samples: deque[tuple[float, float]] = field(default_factory=deque)
    wanted: deque[tuple[float, int]] = field(default_factory=deque)
    """Recommendations of the last scale-down delay: the count is their maximum."""
    last_look: float | None = None
    panic_until: float | None = None
    decision: Decision | None = None


def can_scale_out(spec: ModelSpec) -> bool:
    """Whether ``spec`` lets the count rise above its floor (maxReplicas above 1)."""
    serverless = spec.serverless_or_default
    return serverless.max_replicas > max(1, serverless.min_replicas)


class ScaleOut:
    """Per-Model concurrency windows and the decision over them."""

    def __init__(
        self,
        in_flight: InFlight,
        *,
        clock: Callable[[], float],
        policy: ScaleOutPolicy | None = None,
    ) -> None:
        self._in_flight = in_flight
        self._clock = clock
        self.policy = policy or ScaleOutPolicy()
        self._state: dict[str, _State] = {}

    def due(self, key: str) -> bool:
        """Whether a look at ``key``'s engines is due (one per ``tick_s``)."""
        last = self._state.get(key, _State()).last_look
        return last is None or self._clock() - last >= self.policy.tick_s * 0.9

    async def observe(self, key: str, urls: Sequence[str]) -> float | None:
        """Read the engines' metrics pages ``urls`` once a tick and add their sum to the
        window; the sum, or None when no page gave a reading (nothing is added then: no
        reading is not an idle engine)."""
        if not self.due(key):
            return None
        state = self._state.setdefault(key, _State())
        state.last_look = self._clock()
        readings = await asyncio.gather(*(self._in_flight.requests_in_flight(u) for u in urls))
        known = [r for r in readings if r is not None]
        if not known:
            return None
        total = float(sum(known))
        self.add(key, total)
        return total

    def add(self, key: str, concurrency: float) -> None:
        """Record ``concurrency`` in-flight requests for ``key`` now."""
        state = self._state.setdefault(key, _State())
        now = self._clock()
        state.samples.append((now, concurrency))
        horizon = now - max(self.policy.stable_window_s, self.policy.panic_window_s)
        while state.samples and state.samples[0][0] < horizon:
            state.samples.popleft()

    def decide(self, key: str, spec: ModelSpec, floor: int, ready: int, stored: int) -> Decision:
        """The count for ``key``: ``floor`` (the idle rule's) raised by its concurrency up
        to maxReplicas. ``ready``: its ready replicas (panic compares against them);
        ``stored``: its status' desiredReplicas, which seeds a fresh window."""
        serverless = spec.serverless_or_default
        ceiling = max(serverless.max_replicas, floor)
        target = serverless.target_concurrency
        if floor == 0:
            self._state.pop(key, None)  # idle: the next start begins a fresh window
            return Decision(0, 0, None, False, "Idle", "no request within idleTimeout")
        state = self._state.setdefault(key, _State())
        now = self._clock()
        if not state.wanted and stored > floor:
            state.wanted.append((now, stored))  # a restarted controller: hold what runs
        stable = self._average(state, now - self.policy.stable_window_s)
        # No reading in the whole window (pages unreadable, a busy node): hold what runs,
        # as Knative's autoscaler does; an empty window is not an idle Model.
        wanted = _replicas(stable, target) if stable is not None else stored
        panic = self._panic(state, now, target, ready)
        if panic is not None:
            wanted = max(wanted, panic, ready)
        state.wanted.append((now, wanted))
        while state.wanted and state.wanted[0][0] < now - self.policy.scale_down_delay_s:
            state.wanted.popleft()
        held = max(w for _, w in state.wanted)
        replicas = min(max(held, floor), ceiling)
        reason, message = _why(stable, target, (wanted, held, replicas, floor, ceiling), panic)
        state.decision = Decision(replicas, wanted, stable, panic is not None, reason, message)
        return state.decision

    def _average(self, state: _State, since: float) -> float | None:
        values = [v for t, v in state.samples if t > since]
        return sum(values) / len(values) if values else None

    def _panic(self, state: _State, now: float, target: int, ready: int) -> int | None:
        """The panic window's count while in panic mode (entered by a burst that asks for
        ``panic_threshold`` x the ready replicas), else None."""
        short = self._average(state, now - self.policy.panic_window_s)
        count = _replicas(short, target)
        if count > ready and count >= self.policy.panic_threshold * max(ready, 1):
            state.panic_until = now + self.policy.stable_window_s
        if state.panic_until is None or now >= state.panic_until:
            state.panic_until = None
            return None
        return count

    def last(self, key: str) -> Decision | None:
        """The latest decision for ``key`` (None: none, or it is idle)."""
        state = self._state.get(key)
        return state.decision if state is not None else None

    def forget(self, key: str) -> None:
        """The Model is gone."""
        self._state.pop(key, None)


def _replicas(concurrency: float | None, target: int) -> int:
    return 0 if concurrency is None else math.ceil(concurrency / target - _EPSILON)


def _why(
    stable: float | None, target: int, counts: tuple[int, int, int, int, int], panic: int | None
) -> tuple[str, str]:
    """The status reason and message of a decision; ``counts``: (wanted now, held over the
    delay, decided, floor, ceiling). No live figure goes in the message, so that the status
    changes with the decision, not with every reading."""
    wanted, held, replicas, floor, ceiling = counts
    if stable is None and panic is None:
        return "NoMetrics", (
            "no engine reported its in-flight requests in the stable window; the count holds"
        )
    if wanted > ceiling:
        return "AtMaxReplicas", (
            f"the load asks for {wanted} replicas at {target} in-flight requests each; "
            f"maxReplicas is {ceiling}"
        )
    if held > wanted and replicas > max(wanted, floor):
        return "ScaleDownDelayed", (
            f"the load asks for {wanted} replicas; {replicas} are kept until it has asked "
            "for fewer over the whole scale-down delay"
        )
    if panic is not None:
        return "Panic", f"a burst asks for {wanted} replicas at {target} in-flight each"
    return "Stable", f"{replicas} replicas for {target} in-flight requests each"


def autoscaling_status(
    decision: Decision | None,
    target: int,
    previous: AutoscalingStatus | None,
    changed_at: datetime | None,
    waiting: str | None = None,
) -> AutoscalingStatus:
    """status.autoscaling for ``decision``. ``changed_at``: now when the desired count
    changed in this reconcile (else the previous lastScaleTime stays); ``waiting``: why a
    wanted replica did not start, such as no free GPU (reason ``WaitingForGPU``)."""
    last = changed_at or (previous.last_scale_time if previous is not None else None)
    if decision is None:
        return AutoscalingStatus(target_concurrency=target, reason="Idle", last_scale_time=last)
    reason, message = decision.reason, decision.message
    if waiting is not None:
        reason, message = "WaitingForGPU", f"{decision.replicas} replicas wanted: {waiting}"
    return AutoscalingStatus(
        target_concurrency=target,
        recommended_replicas=decision.recommended,
        mode="Panic" if decision.panic else "Stable",
        reason=reason,
        message=message,
        last_scale_time=last,
    )
