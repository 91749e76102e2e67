"""Load and selection metrics, on a registry the caller owns (no global collectors)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.registry import Collector


class TransferMetrics:
    """Counters named as ModelExpress's ``mx_p2p_*`` where it names them."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.fallbacks = Counter(
            "mx_p2p_strategy_fallbacks",
            "Load strategies that failed or did not apply, so the next one was tried",
            ["strategy", "reason"],
            registry=registry,
        )
        self.selections = Counter(
            "mx_p2p_source_selections",
            "Sources tried, by selection policy and source",
            ["policy", "source"],
            registry=registry,
        )
        self.source_failures = Counter(
            "mx_p2p_source_failures",
            "Pulls from one source that failed, by reason",
            ["reason"],
            registry=registry,
        )
        self.loads = Counter(
            "mx_p2p_loads",
            "Completed loads, by the strategy that produced the weights",
            ["strategy"],
            registry=registry,
        )
        self.transfer_bytes = Counter(
            "mx_p2p_transfer_bytes",
            "Bytes received from peers, by transport",
            ["transport"],
            registry=registry,
        )
        self.load_seconds = Histogram(
            "mx_p2p_load_seconds",
            "Seconds a completed load took, by the strategy that produced the weights",
            ["strategy"],
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300),
            registry=registry,
        )

    def collectors(self) -> list[Collector]:
        """Every metric, for a service to expose on its own registry as well."""
        return [
            self.fallbacks,
            self.selections,
            self.source_failures,
            self.loads,
            self.transfer_bytes,
            self.load_seconds,
        ]
