"""The scheduler's own metrics: how long filter and score take, and why nodes are refused."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram


class SchedulerMetrics:
    """Extender call latency by verb, and filter rejections by the filter that refused."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.latency = Histogram(
            "flexinfer_scheduler_extender_duration_seconds",
            "Seconds the extender took to answer, by verb (filter, prioritize)",
            ["verb"],
            # An extender answers in well under kube-scheduler's default 30 s budget; most
            # calls take a millisecond.
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5),
            registry=registry,
        )
        self.rejections = Counter(
            "flexinfer_scheduler_rejections",
            "Nodes the filter rejected, by reason (the filter that refused them)",
            ["reason"],
            registry=registry,
        )
        self._by_reason: dict[str, Any] = {}
        """Each reason's series, bound once: reasons are the profile's filter names."""

    def rejected(self, counts: Mapping[str, int]) -> None:
        """Count one filter call's rejected nodes by reason."""
        for reason, count in counts.items():
            series = self._by_reason.get(reason)
            if series is None:
                series = self._by_reason[reason] = self.rejections.labels(reason)
            series.inc(count)
