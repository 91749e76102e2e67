"""The proxy's Prometheus metrics, registered on the app's own registry."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


@dataclass(frozen=True)
class ProxyMetrics:
    """Gauges and counters the request path and the queue update."""

    active_connections: Gauge
    queue_depth: Gauge
    cold_starts: Counter
    requests: Counter
    upstream_errors: Counter
    queue_wait: Histogram

    @classmethod
    def create(cls, registry: CollectorRegistry) -> ProxyMetrics:
        """Register every proxy metric on ``registry``."""
        return cls(
            active_connections=Gauge(
                "flexinfer_proxy_active_connections",
                "Requests in flight per model (waiting or streaming)",
                ["model"],
                registry=registry,
            ),
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
            requests=Counter(
                "flexinfer_proxy_requests",
                "OpenAI requests answered, by model and status code",
                ["model", "code"],
                registry=registry,
            ),
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
