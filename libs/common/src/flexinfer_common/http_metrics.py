"""Every service's HTTP request families, recorded cheaply enough for hot requests.

The families are prometheus-fastapi-instrumentator's defaults (``metrics.default``): the same
names, help, labels, label order and buckets, so dashboards and alerts see no difference,
and a test holds them to the instrumentator's own. What differs is the cost: the
instrumentator looks each series up by its label values on every request (about 35 µs a
request on these machines), where ``HttpRequestMetrics`` binds a request's five series once
per (method, handler, status) and then only increments and observes them. The
instrumentator's middleware records routed requests through ``instrumentation``; servers
outside ASGI (``flexinfer_common.http1`` pipelines) call ``record``.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, Summary
from prometheus_fastapi_instrumentator import metrics

HIGHR_BUCKETS = (
    *(0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 2.5, 3, 3.5, 4),
    *(4.5, 5, 7.5, 10, 30, 60),
)
"""``http_request_duration_highr_seconds``' buckets (s): the instrumentator's defaults."""
LOWR_BUCKETS = (0.1, 0.5, 1)
"""``http_request_duration_seconds``' buckets (s): the instrumentator's defaults."""
_SIZE_HELP = "Only value of header is respected. Otherwise ignored. No percentile calculated. "
_MAX_BOUND = 4096
"""Label combinations whose series stay bound; beyond (a client inventing methods), each
request looks its series up as the instrumentator does."""

Series = tuple[Any, Any, Any, Any]


class HttpRequestMetrics:
    """``http_requests_total``, the request and response sizes and two duration histograms."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._total = Counter(
            "http_requests_total",
            "Total number of requests by method, status and handler.",
            ("method", "status", "handler"),
            registry=registry,
        )
        self._in = Summary(
            "http_request_size_bytes",
            "Content length of incoming requests by handler. " + _SIZE_HELP,
            ("handler",),
            registry=registry,
        )
        self._out = Summary(
            "http_response_size_bytes",
            "Content length of outgoing responses by handler. " + _SIZE_HELP,
            ("handler",),
            registry=registry,
        )
        self._highr = Histogram(
            "http_request_duration_highr_seconds",
            "Latency with many buckets but no API specific labels. "
            "Made for more accurate percentile calculations. ",
            buckets=HIGHR_BUCKETS,
            registry=registry,
        )
        self._lowr = Histogram(
            "http_request_duration_seconds",
            "Latency with only few buckets by handler. "
            "Made to be only used if aggregation by handler is important. ",
            ("method", "handler"),
            buckets=LOWR_BUCKETS,
            registry=registry,
        )
        self._bound: dict[tuple[str, str, str], Series] = {}

    def record(
        self,
        method: str,
        handler: str,
        status: str,
        seconds: float,
        *,
        request_bytes: int,
        response_bytes: int,
    ) -> None:
        """One answered request (sizes as their Content-Length headers say, else 0)."""
        key = (method, handler, status)
        series = self._bound.get(key)
        if series is None:
            series = self._series(key)
        total, size_in, size_out, lowr = series
        total.inc()
        size_in.observe(request_bytes)
        size_out.observe(response_bytes)
        self._highr.observe(seconds)
        lowr.observe(seconds)

    def instrumentation(self, info: metrics.Info) -> None:
        """The instrumentator's hook: a request its middleware saw, recorded alike."""
        response = info.response
        out = response.headers.get("Content-Length", 0) if response is not None else 0
        self.record(
            info.method,
            info.modified_handler,
            info.modified_status,
            info.modified_duration,
            request_bytes=int(info.request.headers.get("Content-Length", 0)),
            response_bytes=int(out),
        )

    def _series(self, key: tuple[str, str, str]) -> Series:
        method, handler, status = key
        series = (
            self._total.labels(method, status, handler),
            self._in.labels(handler),
            self._out.labels(handler),
            self._lowr.labels(method, handler),
        )
        if len(self._bound) < _MAX_BOUND:
            self._bound[key] = series
        return series
