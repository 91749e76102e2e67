"""The controller's Prometheus metrics, registered on the app's own registry."""

from __future__ import annotations

from collections import Counter as Tally

from prometheus_client import CollectorRegistry, Counter, Gauge

from flexinfer_controller.runtime import Replica


class ControllerMetrics:
    """Reconciles, engine starts and crashes, and running replicas by state."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.reconciles = Counter(
            "flexinfer_controller_reconciles",
            "Reconciles of one model, by result (ok, error).",
            ["result"],
            registry=registry,
        )
        self.engine_starts = Counter(
            "flexinfer_controller_engine_starts",
            "Engine replicas started, by backend.",
            ["backend"],
            registry=registry,
        )
        self.engine_crashes = Counter(
            "flexinfer_controller_engine_crashes",
            "Engine replicas that exited unexpectedly (crash, failed start, startup timeout).",
            registry=registry,
        )
        self.pruned_replicas = Counter(
            "flexinfer_controller_pruned_replicas",
            "Failed replicas deleted after the reconcile (Kubernetes: evicted, OOM-killed pods).",
            registry=registry,
        )
        self.replicas = Gauge(
            "flexinfer_controller_replicas",
            "Engine replicas the runtime runs, by state (starting, ready).",
            ["state"],
            registry=registry,
        )

    def observe_replicas(self, replicas: list[Replica]) -> None:
        """Set the replicas gauge from the runtime's current list."""
        counts = Tally(r.state.value for r in replicas)
        for state in ("starting", "ready"):
            self.replicas.labels(state).set(counts.get(state, 0))
