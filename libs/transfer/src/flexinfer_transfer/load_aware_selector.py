"""``load_aware``: the least-loaded source first, so a fan-out spreads over sources.

Load is the in-flight reads each source reports through the registry (``source_load``),
plus the reads this process itself has started and not finished (the registry's figure
lags by a heartbeat). Equal loads are ordered by rendezvous hash, so concurrent targets
that see the same loads still pick different sources.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from flexinfer_transfer.selector import (
    SelectionTarget,
    SourceCandidate,
    SourceSelector,
    rendezvous_weight,
)


class InFlightReads:
    """Reads this process has in flight, per source key."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reads: Counter[str] = Counter()

    @contextmanager
    def reading(self, candidate: SourceCandidate) -> Iterator[None]:
        """Count one read from ``candidate`` while the block runs."""
        with self._lock:
            self._reads[candidate.key] += 1
        try:
            yield
        finally:
            with self._lock:
                self._reads[candidate.key] -= 1

    def count(self, candidate: SourceCandidate) -> int:
        """Reads in flight from ``candidate``."""
        with self._lock:
            return self._reads[candidate.key]


class LoadAwareSelector(SourceSelector):
    """Orders by reported plus local in-flight reads, then by HRW weight."""

    name = "load_aware"

    def __init__(self, in_flight: InFlightReads | None = None) -> None:
        self.in_flight = in_flight or InFlightReads()

    def order(
        self, candidates: Sequence[SourceCandidate], target: SelectionTarget
    ) -> list[SourceCandidate]:
        """Least loaded first."""

        def key(candidate: SourceCandidate) -> tuple[float, int]:
            load = (candidate.source_load or 0.0) + self.in_flight.count(candidate)
            return load, -rendezvous_weight(target, candidate)

        return sorted(candidates, key=key)
