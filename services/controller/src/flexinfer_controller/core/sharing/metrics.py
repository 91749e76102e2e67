"""Swap metrics on the controller's registry: swaps by group and reason, and each swap's
latency split into its steps.

A swap is timed step by step, as each step is seen: ``drain`` (the loser's endpoints are
withdrawn until no request runs on it, or its grace passed), ``stop`` (the loser's engine
was told to stop until it exited) and ``start`` (the winner's engine started until it was
Ready). ``total`` runs from the arbiter's decision to the winner's Ready, so it also holds
the wait for the GPU and any crash backoff. The sleep mode's steps (``sleep``, ``wake``)
are labels of the same histogram.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Histogram

from flexinfer_controller.core.sharing.decide import Swap

STEP_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0)
"""Seconds: a wake is sub-second, a drain ends by its grace (30 s by default, 300 s at
most for a GPUGroup), a cold start of a large model takes minutes (the seed saw 45-60 s)."""


@dataclass(slots=True)
class _Pending:
    group: str
    at: float


class SwapMetrics:
    """Counts swaps and times their steps (``now``: a monotonic clock in seconds)."""

    def __init__(self, registry: CollectorRegistry, now: Callable[[], float]) -> None:
        self._now = now
        self.swaps = Counter(
            "flexinfer_controller_gpu_swaps",
            "Swaps of a shared GPU, by group and reason (priority, idle, aging, fallback).",
            ["group", "reason"],
            registry=registry,
        )
        self.steps = Histogram(
            "flexinfer_controller_gpu_swap_step_seconds",
            "Seconds each step of a swap took, by group and step (drain, stop or sleep, "
            "start or wake).",
            ["group", "step"],
            buckets=STEP_BUCKETS,
            registry=registry,
        )
        self.total = Histogram(
            "flexinfer_controller_gpu_swap_seconds",
            "Seconds from a swap's decision to its winner's engine being Ready.",
            ["group"],
            buckets=STEP_BUCKETS,
            registry=registry,
        )
        self.drain_timeouts = Counter(
            "flexinfer_controller_gpu_swap_drain_timeouts",
            "Drains cut off at their grace with requests still running, by group.",
            ["group"],
            registry=registry,
        )
        self._winners: dict[str, _Pending] = {}
        self._stopping: dict[str, _Pending] = {}

    def swapped(self, group: str, swap: Swap) -> None:
        """The arbiter decided ``swap``: counted, and its winner's start awaited."""
        self.swaps.labels(group, swap.reason).inc()
        self._winners[swap.winner] = _Pending(group, self._now())

    def drained(self, group: str, seconds: float, *, timed_out: bool) -> None:
        """A loser's engine drained (or was cut off at its grace) in ``seconds``."""
        self.steps.labels(group, "drain").observe(seconds)
        if timed_out:
            self.drain_timeouts.labels(group).inc()

    def stopping(self, group: str, replica: str) -> None:
        """A loser's engine was told to stop now."""
        self._stopping[replica] = _Pending(group, self._now())

    def stopped(self, replica: str) -> None:
        """An engine exited; timed when it was a loser's."""
        pending = self._stopping.pop(replica, None)
        if pending is not None:
            self.steps.labels(pending.group, "stop").observe(self._now() - pending.at)

    def slept(self, replica: str, took_s: float | None) -> None:
        """A loser's engine was put to sleep instead of stopped: its ``sleep`` step."""
        pending = self._stopping.pop(replica, None)
        if pending is not None and took_s is not None:
            self.steps.labels(pending.group, "sleep").observe(took_s)

    def ready(self, key: str, took_s: float | None, *, woken: bool = False) -> None:
        """An engine of Model ``key`` is Ready after ``took_s`` (a start, or a wake when
        ``woken``); timed when ``key`` won a swap that waits for it."""
        pending = self._winners.pop(key, None)
        if pending is None:
            return
        if took_s is not None:
            self.steps.labels(pending.group, "wake" if woken else "start").observe(took_s)
        self.total.labels(pending.group).observe(self._now() - pending.at)

    def step(self, group: str, step: str, seconds: float) -> None:
        """Another step of a swap (``sleep``, ``wake``) took ``seconds``."""
        self.steps.labels(group, step).observe(seconds)

    def forget(self, key: str) -> None:
        """Model ``key`` lost or left the GPU before its engine was Ready."""
        self._winners.pop(key, None)
