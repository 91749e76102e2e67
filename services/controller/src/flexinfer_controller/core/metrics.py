"""The controller's Prometheus metrics, registered on the app's own registry."""

from __future__ import annotations

import contextlib
from collections import Counter as Tally
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from flexinfer_controller.runtime import Replica


class ModelPhases(Collector):
    """``flexinfer_controller_models{phase}``: Models by the phase their last status says."""

    def __init__(self) -> None:
        self._phases: dict[str, str] = {}

    def set(self, key: str, phase: str) -> None:
        """``key``'s status now says ``phase``."""
        self._phases[key] = phase

    def forget(self, key: str) -> None:
        """The Model is gone."""
        self._phases.pop(key, None)

    def collect(self) -> Iterator[Metric]:
        """The gauge family, at scrape time."""
        family = GaugeMetricFamily(
            "flexinfer_controller_models", "Models by status phase", labels=["phase"]
        )
        for phase, count in sorted(Tally(self._phases.values()).items()):
            family.add_metric([phase], count)
        yield family


class ControllerMetrics:
    """Reconciles, scale events, engine starts and crashes, replicas and Models by state."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.models = ModelPhases()
        registry.register(self.models)
        self.reconcile_seconds = Histogram(
            "flexinfer_controller_reconcile_duration_seconds",
            "Seconds one reconcile of one model took (engine starts are awaited in it)",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
            registry=registry,
        )
        self.scale_events = Counter(
            "flexinfer_controller_scale_events",
            "Changes of a Model's desired replica count, by the replicas added (up) or "
            "removed (down); crash restarts and replacements are engine starts, not these.",
            ["direction"],
            registry=registry,
        )
        self._desired: dict[str, int] = {}
        self.reconciles = Counter(
            "flexinfer_controller_reconciles",
            "Reconciles of one model, by result (ok, error).",
            ["result"],
            registry=registry,
        )
        self.engine_starts = Counter(
            "flexinfer_controller_engine_starts",
            "Engine replicas started, by backend: scale-ups, restarts after a crash and "
            "replacements on a spec change.",
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

        self.scaling_concurrency = Gauge(
            "flexinfer_controller_scaling_concurrency",
            "In-flight requests a Model's engines held, averaged over the stable window "
            "(the scale-out signal; Models with maxReplicas above 1)",
            ["model"],
            registry=registry,
        )
        self.scaling_desired = Gauge(
            "flexinfer_controller_scaling_desired_replicas",
            "Replicas the scale-out decision wants for a Model (before GPU sharing)",
            ["model"],
            registry=registry,
        )

    def observe_scaling(self, key: str, concurrency: float | None, desired: int) -> None:
        """Set ``key``'s scale-out gauges (no concurrency series without a reading)."""
        if concurrency is not None:
            self.scaling_concurrency.labels(key).set(concurrency)
        self.scaling_desired.labels(key).set(desired)

    def forget_scaling(self, key: str) -> None:
        """``key`` no longer scales out (or is gone): drop its series."""
        for gauge in (self.scaling_concurrency, self.scaling_desired):
            with contextlib.suppress(KeyError):
                gauge.remove(key)

    def desired(self, key: str, desired: int, running: int) -> None:
        """Model ``key`` wants ``desired`` replicas now: a change from the last count is a
        scale event. The first time, the ``running`` replicas stand for the last count, so a
        restarted controller that finds its engines running counts no scale-up."""
        before = self._desired.get(key, running)
        self._desired[key] = desired
        self._scaled(desired - before)

    def forget(self, key: str) -> None:
        """Model ``key`` is gone: whatever it wanted is scaled down."""
        self.models.forget(key)
        self._scaled(-self._desired.pop(key, 0))

    def _scaled(self, change: int) -> None:
        if change > 0:
            self.scale_events.labels("up").inc(change)
        elif change < 0:
            self.scale_events.labels("down").inc(-change)

    def observe_replicas(self, replicas: list[Replica]) -> None:
        """Set the replicas gauge from the runtime's current list."""
        counts = Tally(r.state.value for r in replicas)
        for state in ("starting", "ready"):
            self.replicas.labels(state).set(counts.get(state, 0))
