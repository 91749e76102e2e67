"""One cold request through a real proxy and a real controller (sharing a bus and a store,
one process) is one connected trace: the proxy's request span, its model resolution,
queue wait and upstream spans, and the controller's scale-up span under the request."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from flexinfer_common.bus.memory import MemoryBus
from flexinfer_common.serving import serve_in_background
from flexinfer_common.settings import StoreSettings, TelemetrySettings
from flexinfer_common.store import create_store
from flexinfer_controller.core.activation_trace import ActivationTraces
from flexinfer_controller.testing import (
    eventually,
    fake_model_dir,
    kill_engines,
    model_doc,
    run_controller,
)
from flexinfer_engine.core.weights import generate_model
from flexinfer_proxy.app import create_app
from flexinfer_proxy.serve import serve_proxy_in_background
from flexinfer_proxy.settings import ProxySettings
from flexinfer_testing.otlp_receiver import TRACES_PATH, OtlpReceiver

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"
PROXY_SPANS = {"POST /v1/completions", "resolve model", "queue wait", "upstream"}


def named(exporter: InMemorySpanExporter) -> dict[str, ReadableSpan]:
    """The finished spans by name."""
    return {span.name: span for span in exporter.get_finished_spans()}


async def cold_request(
    tmp_path: Path, exporter: InMemorySpanExporter, source: str, **controller: Any
) -> None:
    """A real controller and proxy sharing a bus and a store; one traced streamed request
    for the cold Model ``tiny`` (from ``source``), then the Model deleted."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    bus = MemoryBus()
    store = create_store(StoreSettings(url=f"sqlite:///{tmp_path}/store.db"))
    try:
        async with run_controller(tmp_path, store=store, bus=bus, **controller) as h:
            tracer = provider.get_tracer("flexinfer.controller")
            h.app.state.controller.activations = ActivationTraces(tracer)
            doc = model_doc("tiny", source)
            assert (await h.client.put("/v1/admin/models/tiny", json=doc)).status_code == 201
            await h.wait_phase("tiny", "Idle")
            telemetry = TelemetrySettings(otel_enabled=True)
            settings = ProxySettings(port=0, instance_id="trace", telemetry=telemetry)
            app = create_app(settings, bus=bus, store=store, span_exporter=exporter)
            async with (
                serve_proxy_in_background(app, server=settings.server) as url,
                httpx.AsyncClient(base_url=url, timeout=120) as client,
            ):
                body = {"model": "tiny", "prompt": "hi", "max_tokens": 2, "stream": True}
                headers = {"traceparent": f"00-{TRACE_ID}-{CLIENT_SPAN}-01"}
                reply = await client.post("/v1/completions", json=body, headers=headers)
                assert reply.status_code == 200
                assert "data: [DONE]" in reply.text
            await eventually(lambda: PROXY_SPANS | {"scale-up"} <= set(named(exporter)))
            assert (await h.client.delete("/v1/admin/models/tiny")).status_code == 204
            await h.endpoints_event("default/tiny", count=0)
    finally:
        await bus.close()
        await store.close()
    assert kill_engines(tmp_path) == []


async def test_one_cold_request_is_one_trace_across_proxy_and_controller(
    tmp_path: Path,
) -> None:
    exporter = InMemorySpanExporter()
    await cold_request(tmp_path, exporter, fake_model_dir(tmp_path / "weights").as_uri())

    spans = named(exporter)
    assert {format(s.context.trace_id, "032x") for s in spans.values()} == {TRACE_ID}
    server = spans["POST /v1/completions"]
    assert server.parent is not None
    assert format(server.parent.span_id, "016x") == CLIENT_SPAN
    for name in ("resolve model", "queue wait", "upstream", "scale-up"):
        parent = spans[name].parent
        assert parent is not None, name
        assert parent.span_id == server.context.span_id, name
    # The scale-up happened inside the request's wait for an endpoint.
    wait, scale_up = spans["queue wait"], spans["scale-up"]
    assert (wait.start_time or 0) <= (scale_up.start_time or -1)
    assert (scale_up.end_time or 0) <= (wait.end_time or -1)


@pytest.mark.slow
@pytest.mark.timeout(300)
async def test_the_engines_weight_loading_joins_the_cold_requests_trace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A real engine (its own process) exports its spans over OTLP to a receiver here; the
    # controller starts it with the scale-up's traceparent (TRACEPARENT).
    receiver = OtlpReceiver()
    async with serve_in_background(receiver.app()) as collector:
        monkeypatch.setenv("FLEXINFER_TELEMETRY_OTEL_ENABLED", "true")
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"{collector}{TRACES_PATH}")
        monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")  # ms: export while the test waits
        model_dir = generate_model(tmp_path / "tiny", name="tiny", preset="tiny")
        exporter = InMemorySpanExporter()
        await cold_request(
            tmp_path,
            exporter,
            model_dir.as_uri(),
            engine_python=sys.executable,
            engine_startup_timeout_s=120.0,
        )
        await eventually(lambda: receiver.named("engine.load_weights") != [], timeout_s=30)
    scale_up = named(exporter)["scale-up"]
    (load,) = receiver.named("engine.load_weights")
    assert load.trace_id == TRACE_ID
    assert load.parent_span_id == format(scale_up.context.span_id, "016x")
    assert load.service == "flexinfer-engine"
