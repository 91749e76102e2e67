"""The request families are the instrumentator's own: names, types, help, labels, buckets."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry
from prometheus_fastapi_instrumentator import metrics
from starlette.requests import Request
from starlette.responses import Response

from flexinfer_common.http_metrics import HttpRequestMetrics

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def info(method: str, handler: str, status: str, seconds: float, size: int) -> metrics.Info:
    """What the instrumentator's middleware hands its instrumentations for one request."""
    scope = {"type": "http", "method": method, "headers": [(b"content-length", b"17")]}
    return metrics.Info(
        request=Request(scope),
        response=Response(b"x" * size, status_code=int(status)),
        method=method,
        modified_handler=handler,
        modified_status=status,
        modified_duration=seconds,
    )


def families(registry: CollectorRegistry) -> tuple[list[tuple[str, str, str]], Samples]:
    """Each family's (name, type, help), and every sample but the creation times."""
    described, samples = [], {}
    for family in registry.collect():
        described.append((family.name, family.type, family.documentation))
        for sample in family.samples:
            if not sample.name.endswith("_created"):
                samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return sorted(described), samples


REQUESTS = [
    ("POST", "/filter", "200", 0.0004, 900),
    ("POST", "/filter", "200", 0.7, 10),
    ("GET", "/filter", "405", 0.02, 120),
    ("POST", "/score", "400", 3.2, 80),
    ("PATCH", "none", "404", 75.0, 0),
]


@pytest.mark.parametrize("way", ["instrumentation", "record"])
def test_the_families_are_the_instrumentators_own(way: str) -> None:
    reference, ours = CollectorRegistry(), CollectorRegistry()
    theirs = metrics.default(registry=reference)
    assert theirs is not None
    recorder = HttpRequestMetrics(ours)
    for method, handler, status, seconds, size in REQUESTS:
        theirs(info(method, handler, status, seconds, size))
        if way == "instrumentation":
            recorder.instrumentation(info(method, handler, status, seconds, size))
        else:
            recorder.record(method, handler, status, seconds, request_bytes=17, response_bytes=size)
    assert families(ours) == families(reference)


def test_series_stay_bound_up_to_a_bound_then_are_looked_up() -> None:
    registry = CollectorRegistry()
    recorder = HttpRequestMetrics(registry)
    for i in range(5000):  # a client inventing methods cannot grow the bound series forever
        recorder.record(f"M{i}", "none", "405", 0.001, request_bytes=0, response_bytes=0)
    recorder.record("M4999", "none", "405", 0.001, request_bytes=0, response_bytes=0)
    _, samples = families(registry)
    labels = (("handler", "none"), ("method", "M4999"), ("status", "405"))
    assert samples[("http_requests_total", labels)] == 2
    assert len(recorder._bound) == 4096
