"""The proxy's Prometheus metrics, registered on the app's own registry.

What changes on every request (answers by model, route and code; request duration, TTFB
and TTFT; requests in flight) is kept in plain dicts and lists read at scrape time: a
prometheus_client child takes a lock and validates on every update, a few µs per request
on a path that costs tens. The proxy serves from one event loop, which also answers
scrapes, so no lock is needed.

Label values are bounded: models are the resolved keys of declared Models ("" before a
model is known), routes are the proxied routes of the surface ("none" for any other path).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

NO_ROUTE = "none"
"""The route label of a request whose path is no proxied route (as the instrumentator
labels unmatched handlers)."""
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
"""Seconds: from a warm answer's few ms to a cold start's minutes."""
COLD_START_BUCKETS = (0.5, 1, 2.5, 5, 10, 20, 30, 45, 60, 90, 120, 300, 600, 1200)
"""Seconds: a cold start phase takes from under a second (scheduled) to minutes (pulling)."""


class FastHistogram(Collector):
    """A histogram family observed with a bisect and two adds, exported at scrape time."""

    def __init__(
        self, name: str, documentation: str, labels: Sequence[str], buckets: Sequence[float]
    ) -> None:
        self.name = name
        self._doc = documentation
        self._labels = list(labels)
        self._bounds = tuple(sorted(buckets))
        self._series: dict[tuple[Any, ...], list[float]] = {}
        """Per label values: count per bucket (not cumulative; last is +Inf), then the sum."""

    def observe(self, labels: tuple[Any, ...], value: float) -> None:
        """Record ``value`` under ``labels`` (one value per label name, in order)."""
        series = self._series.get(labels)
        if series is None:
            series = self._series[labels] = [0.0] * (len(self._bounds) + 2)
        series[bisect_left(self._bounds, value)] += 1
        series[-1] += value

    def collect(self) -> Iterator[Metric]:
        """The histogram family, buckets made cumulative."""
        yield self._family(self._series)

    def _family(self, series_by_labels: Mapping[tuple[Any, ...], list[float]]) -> Metric:
        family = HistogramMetricFamily(self.name, self._doc, labels=self._labels)
        bounds = [*(_le(b) for b in self._bounds), "+Inf"]
        for labels, series in sorted(series_by_labels.items()):
            buckets, total = [], 0.0
            for bound, count in zip(bounds, series, strict=False):
                total += count
                buckets.append((bound, total))
            family.add_metric([str(v) for v in labels], buckets, sum_value=series[-1])
        return family


class RequestStats(FastHistogram):
    """Answered requests, observed once each by ``(model, route, code)`` with their
    duration, and exported as three families: ``flexinfer_proxy_requests_total{model,route,
    code}``, the ``http_requests_total{handler,method,status}`` every other service exports
    (summed over models), and ``flexinfer_proxy_request_duration_seconds{model,route}``
    (summed over codes). One observation per request serves all three."""

    def __init__(self) -> None:
        super().__init__(
            "flexinfer_proxy_request_duration_seconds",
            "Seconds from a request's arrival to its answer's last byte",
            ["model", "route"],
            LATENCY_BUCKETS,
        )

    def collect(self) -> Iterator[Metric]:
        """The three families, at scrape time."""
        requests = CounterMetricFamily(
            "flexinfer_proxy_requests",
            "OpenAI requests answered, by model, route and status code",
            labels=["model", "route", "code"],
        )
        http: dict[tuple[str, str], float] = {}
        durations: dict[tuple[Any, ...], list[float]] = {}
        for (model, route, status), series in sorted(self._series.items()):
            count = sum(series[:-1])
            requests.add_metric([model, route, str(status)], count)
            http[(route, str(status))] = http.get((route, str(status)), 0) + count
            summed = durations.setdefault((model, route), [0.0] * len(series))
            for index, value in enumerate(series):
                summed[index] += value
        yield requests
        # Proxied routes are all POST (others are answered 405 and counted as such).
        generic = CounterMetricFamily(
            "http_requests",
            "Total number of requests by method, status and handler.",
            labels=["handler", "method", "status"],
        )
        for (route, status_text), count in sorted(http.items()):
            generic.add_metric([route, "POST", status_text], count)
        yield generic
        yield self._family(durations)


def _le(bound: float) -> str:
    # prometheus_client's own spelling of bucket bounds (1 -> "1.0"), so dashboards match.
    return repr(float(bound))


class ActiveConnections(Collector):
    """``flexinfer_proxy_active_connections{model}``, read from the activity tracker."""

    def __init__(self, read: Callable[[], Mapping[str, int]]) -> None:
        self._read = read

    def collect(self) -> Iterator[Metric]:
        """The gauge family, at scrape time."""
        family = GaugeMetricFamily(
            "flexinfer_proxy_active_connections",
            "Requests in flight per model (waiting or streaming)",
            labels=["model"],
        )
        for model, count in sorted(self._read().items()):
            family.add_metric([model], count)
        yield family


@dataclass(frozen=True)
class ProxyMetrics:
    """Gauges, counters and histograms the request path and the queue update."""

    queue_depth: Gauge
    cold_starts: Counter
    requests: RequestStats
    """Answers by ``(model, route, code)`` with their duration: arrival to the answer's
    last byte (or the error sent)."""
    ttfb: FastHistogram
    """``{model,route}``: arrival to the engine's answer head (queue wait included)."""
    ttft: FastHistogram
    """``{model}``: arrival to the first whole server-sent event of a streamed answer."""
    upstream_errors: Counter
    queue_wait: Histogram
    rate_limited: Counter
    cold_start_phase: Histogram
    cold_start_duration: Histogram

    @classmethod
    def create(
        cls, registry: CollectorRegistry, active: Callable[[], Mapping[str, int]]
    ) -> ProxyMetrics:
        """Register every proxy metric on ``registry``; ``active``: requests in flight."""
        requests = RequestStats()
        fast = _fast_histograms()
        rate_limited, phase, cold = _cold_start_metrics(registry)
        for collector in (requests, ActiveConnections(active), *fast):
            registry.register(collector)
        return cls(
            queue_depth=Gauge(
                "flexinfer_proxy_queue_depth",
                "Requests waiting for a cold model",
                ["model"],
                registry=registry,
            ),
            cold_starts=Counter(
                "flexinfer_proxy_cold_starts",
                "Times requests found a model without a ready endpoint and demanded one",
                ["model"],
                registry=registry,
            ),
            requests=requests,
            ttfb=fast[0],
            ttft=fast[1],
            upstream_errors=Counter(
                "flexinfer_proxy_upstream_errors",
                "Upstream failures: connect (retried) or broken (mid-response)",
                ["model", "kind"],
                registry=registry,
            ),
            queue_wait=Histogram(
                "flexinfer_proxy_queue_wait_seconds",
                "Seconds requests waited for a ready endpoint",
                ["model"],
                buckets=(0.1, 0.5, 1, 2.5, 5, 10, 20, 30, 45, 60, 90, 120, 300),
                registry=registry,
            ),
            rate_limited=rate_limited,
            cold_start_phase=phase,
            cold_start_duration=cold,
        )


def _fast_histograms() -> tuple[FastHistogram, FastHistogram]:
    return (
        FastHistogram(
            "flexinfer_proxy_ttfb_seconds",
            "Seconds from a request's arrival to the engine's answer head (queue wait included)",
            ["model", "route"],
            LATENCY_BUCKETS,
        ),
        FastHistogram(
            "flexinfer_proxy_ttft_seconds",
            "Seconds from a streamed request's arrival to its first server-sent event",
            ["model"],
            LATENCY_BUCKETS,
        ),
    )


def _cold_start_metrics(registry: CollectorRegistry) -> tuple[Counter, Histogram, Histogram]:
    return (
        Counter(
            "flexinfer_proxy_rate_limited",
            "Requests refused with 429 by the rate limiter",
            ["model"],
            registry=registry,
        ),
        Histogram(
            "flexinfer_proxy_cold_start_phase_duration_seconds",
            "Seconds each cold-start phase took, as the proxy saw the controller's progress",
            ["model", "phase"],
            buckets=COLD_START_BUCKETS,
            registry=registry,
        ),
        Histogram(
            "flexinfer_proxy_cold_start_duration_seconds",
            "Seconds from a cold start's demand to the model's first ready endpoint",
            ["model"],
            buckets=COLD_START_BUCKETS,
            registry=registry,
        ),
    )
