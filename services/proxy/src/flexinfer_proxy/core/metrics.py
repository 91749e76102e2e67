"""The proxy's Prometheus metrics, registered on the app's own registry.

The two that change on every request, answers by code and requests in flight, are plain
dict counts read at scrape time: a prometheus_client child takes a lock and validates on
every update, a few µs per request on a path that costs tens.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector


class RequestCounts(Collector):
    """``flexinfer_proxy_requests_total{model,code}``: OpenAI requests answered."""

    def __init__(self) -> None:
        self._counts: dict[tuple[str, int], int] = {}

    def count(self, model: str, status: int) -> None:
        """One answer with ``status`` for ``model`` (``""`` before a model is known)."""
        key = (model, status)
        self._counts[key] = self._counts.get(key, 0) + 1

    def collect(self) -> Iterator[Metric]:
        """The counter family, at scrape time."""
        family = CounterMetricFamily(
            "flexinfer_proxy_requests",
            "OpenAI requests answered, by model and status code",
            labels=["model", "code"],
        )
        for (model, status), count in sorted(self._counts.items()):
            family.add_metric([model, str(status)], count)
        yield family


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
    """Gauges and counters the request path and the queue update."""

    queue_depth: Gauge
    cold_starts: Counter
    requests: RequestCounts
    upstream_errors: Counter
    queue_wait: Histogram

    @classmethod
    def create(
        cls, registry: CollectorRegistry, active: Callable[[], Mapping[str, int]]
    ) -> ProxyMetrics:
        """Register every proxy metric on ``registry``; ``active``: requests in flight."""
        requests = RequestCounts()
        registry.register(requests)
        registry.register(ActiveConnections(active))
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
        )
