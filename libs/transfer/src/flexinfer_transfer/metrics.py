"""Load, selection and artifact metrics, on a registry the caller owns (no global collectors).

Names follow ModelExpress where it gives them: the seed names
``mx_p2p_source_selections_total``; ``mx_p2p_transfer_seconds`` and
``mx_artifact_install_bytes_total`` are the modelexpress client's. Counters are declared
without ``_total``, which prometheus_client appends on export.

Opt-in as in ModelExpress: a library embedded in someone else's engine exports nothing
unless MX_METRICS_ENABLED is truthy (``metrics_enabled``); disabled, the collectors count
on a private registry that no scrape reads, so callers never branch. Our engine turns
them on unconditionally (``TransferMetrics(registry)``).
"""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.registry import Collector

METRICS_ENV = "MX_METRICS_ENABLED"
TRUTHY = frozenset({"1", "true", "yes", "on"})

TRANSFER_BUCKETS_S = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
"""A pull takes from milliseconds (a small model over CMA) to minutes (tens of GB)."""


def metrics_enabled(env: Mapping[str, str]) -> bool:
    """Whether MX_METRICS_ENABLED asks for the mx_* metrics (off when unset)."""
    return env.get(METRICS_ENV, "").strip().lower() in TRUTHY


class TransferMetrics:
    """Counters and histograms named as ModelExpress's ``mx_*`` where it names them."""

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
        self.transfer_seconds = Histogram(
            "mx_p2p_transfer_seconds",
            "Seconds of one pull from one source, by policy and outcome (success|retry)",
            ["policy", "outcome"],
            buckets=TRANSFER_BUCKETS_S,
            registry=registry,
        )
        self.load_seconds = Histogram(
            "mx_p2p_load_seconds",
            "Seconds a completed load took, by the strategy that produced the weights",
            ["strategy"],
            buckets=TRANSFER_BUCKETS_S,
            registry=registry,
        )
        self._artifacts(registry)

    def _artifacts(self, registry: CollectorRegistry) -> None:
        self.artifact_bytes = Counter(
            "mx_artifact_install_bytes",
            "Artifact bytes received, verified and installed, by artifact kind",
            ["artifact"],
            registry=registry,
        )
        self.artifact_chunk_retries = Counter(
            "mx_artifact_chunk_retries",
            "Artifact chunks read again after a CRC32C mismatch, by artifact kind",
            ["artifact"],
            registry=registry,
        )
        self.artifact_failures = Counter(
            "mx_artifact_transfer_failures",
            "Artifact fetches abandoned (nothing installed), by artifact kind and reason",
            ["artifact", "reason"],
            registry=registry,
        )

    @classmethod
    def opt_in(cls, registry: CollectorRegistry, env: Mapping[str, str]) -> TransferMetrics:
        """Metrics exported on ``registry`` when MX_METRICS_ENABLED is set, else counted on a
        private registry (for a library embedded in an engine that did not ask)."""
        return cls(registry if metrics_enabled(env) else CollectorRegistry())

    def collectors(self) -> list[Collector]:
        """Every metric, for a service to expose on its own registry as well."""
        return [
            self.fallbacks,
            self.selections,
            self.source_failures,
            self.loads,
            self.transfer_bytes,
            self.transfer_seconds,
            self.load_seconds,
            self.artifact_bytes,
            self.artifact_chunk_retries,
            self.artifact_failures,
        ]
