"""Cold starts timed as the proxy sees them: from its demand, through each phase the
controller reports, to the model's first ready endpoint."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from prometheus_client import Histogram

from flexinfer_proxy.core.progress import QUEUED

READY = "ready"


@dataclass(slots=True)
class _Start:
    began: float
    phase: str
    since: float


class ColdStartClock:
    """Observes each phase's seconds and the whole start's; one start per model at a time.

    Only models the proxy itself demanded are timed, so phase events for other names (from
    the bus) add no label values.
    """

    def __init__(
        self,
        phases: Histogram,
        total: Histogram,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._phases = phases
        self._total = total
        self._clock = clock
        self._open: dict[str, _Start] = {}

    def begin(self, model: str) -> None:
        """``model``'s cold start was demanded now; it waits in the queue until a phase."""
        now = self._clock()
        self._open[model] = _Start(now, QUEUED, now)

    def phase(self, model: str, phase: str) -> None:
        """``model``'s start reached ``phase``: the phase before it ends now."""
        start = self._open.get(model)
        if start is None or start.phase == phase:
            return
        now = self._clock()
        self._phases.labels(model, start.phase).observe(now - start.since)
        if phase == READY:
            self._total.labels(model).observe(now - start.began)
            del self._open[model]
            return
        start.phase, start.since = phase, now

    def forget(self, keep: set[str]) -> None:
        """Drop starts of models no longer declared."""
        for model in [m for m in self._open if m not in keep]:
            del self._open[model]
