"""Telemetry bootstrap: a metrics registry per app, and OpenTelemetry spans when enabled."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from fastapi import FastAPI
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry, Counter
from starlette.types import Receive, Scope, Send

from flexinfer_common.serving import serve_in_background
from flexinfer_common.settings import TelemetrySettings
from flexinfer_common.telemetry import otlp_exporter, setup_telemetry


def make_app() -> FastAPI:
    """A tiny app with one route."""
    app = FastAPI()

    @app.get("/hello")
    async def hello() -> dict[str, str]:
        return {"hello": "world"}

    return app


async def test_two_apps_in_one_process_keep_separate_metrics() -> None:
    apps = [make_app(), make_app()]
    telemetry = [setup_telemetry(app, "svc", TelemetrySettings()) for app in apps]
    # The same metric name on both registries: the global registry would reject the second.
    counters = [Counter("flexinfer_test_things", "things", registry=t.registry) for t in telemetry]
    counters[0].inc(3)
    for app, expected in zip(apps, ("3.0", "0.0"), strict=True):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            assert (await client.get("/hello")).status_code == 200
            text = (await client.get("/metrics")).text
        assert f"flexinfer_test_things_total {expected}" in text
        assert 'handler="/hello"' in text


async def test_metrics_can_be_turned_off() -> None:
    app = make_app()
    setup_telemetry(app, "svc", TelemetrySettings(metrics_enabled=False))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        assert (await client.get("/metrics")).status_code == 404


async def test_tracing_records_a_span_per_request() -> None:
    app = make_app()
    exporter = InMemorySpanExporter()
    telemetry = setup_telemetry(
        app, "svc", TelemetrySettings(otel_enabled=True), span_exporter=exporter
    )
    assert telemetry.tracing
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        assert (await client.get("/hello")).status_code == 200
        assert (await client.get("/healthz")).status_code == 404
    provider = telemetry.tracer_provider
    assert provider is not None
    provider.force_flush()
    spans = exporter.get_finished_spans()
    assert any(span.name == "GET /hello" for span in spans)
    assert all(span.resource.attributes["service.name"] == "flexinfer-svc" for span in spans)
    provider.shutdown()


def test_tracing_is_off_by_default() -> None:
    telemetry = setup_telemetry(make_app(), "svc", TelemetrySettings())
    assert not telemetry.tracing


async def test_otlp_export_follows_the_standard_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    received: list[bytes] = []

    async def collector(scope: Scope, receive: Receive, send: Send) -> None:
        """An OTLP/HTTP collector: keeps each POST /v1/traces body."""
        if scope["type"] != "http":
            return
        body, more = b"", True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        if scope["path"] == "/v1/traces":
            received.append(body)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async with serve_in_background(collector) as url:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", url)
        telemetry = setup_telemetry(make_app(), "svc", TelemetrySettings(otel_enabled=True))
        provider = telemetry.tracer_provider
        assert provider is not None
        with provider.get_tracer("test").start_as_current_span("exported"):
            pass
        await asyncio.to_thread(provider.force_flush)
        provider.shutdown()
    request = ExportTraceServiceRequest.FromString(received[0])
    spans = [s for r in request.resource_spans for ss in r.scope_spans for s in ss.spans]
    assert [s.name for s in spans] == ["exported"]


def test_no_collector_named_means_no_exporter() -> None:
    assert otlp_exporter(TelemetrySettings(otel_enabled=True)) is None


async def test_a_request_recorded_outside_asgi_lands_in_the_instrumentators_families() -> None:
    # Two apps: one routed request through the middleware, one recorded by hand with the
    # same method, handler, status and sizes; their samples must be the same, durations aside.
    routed, recorded = make_app(), make_app()
    telemetry = [setup_telemetry(app, "svc", TelemetrySettings()) for app in (routed, recorded)]
    transport = httpx.ASGITransport(app=routed)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        answer = await client.get("/hello")
    requests = telemetry[1].requests
    assert requests is not None
    requests.record(
        "GET", "/hello", "200", 0.001, request_bytes=0, response_bytes=len(answer.content)
    )

    def samples(
        registry: CollectorRegistry,
    ) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        return {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in registry.collect()
            if family.name.startswith("http_request") and "duration" not in family.name
            for s in family.samples
            if not s.name.endswith("_created")
        }

    assert samples(telemetry[0].registry) == samples(telemetry[1].registry)
    assert (
        samples(telemetry[1].registry)[
            ("http_requests_total", (("handler", "/hello"), ("method", "GET"), ("status", "200")))
        ]
        == 1
    )


def test_without_request_metrics_there_is_no_recorder() -> None:
    off = setup_telemetry(make_app(), "svc", TelemetrySettings(metrics_enabled=False))
    uninstrumented = setup_telemetry(
        make_app(), "svc", TelemetrySettings(), instrument_requests=False
    )
    assert off.requests is None
    assert uninstrumented.requests is None
