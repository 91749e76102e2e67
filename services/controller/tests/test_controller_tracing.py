"""A traced cold start: the controller's scale-up span joins the demanding request's trace;
the controller's calls to the registry carry its current span over gRPC."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from flexinfer_common.bus import topics
from flexinfer_common.serving import serve_in_background
from flexinfer_common.settings import TelemetrySettings
from flexinfer_controller.adapters.registry.client import DOWNLOADED, ModelRef, RegistryClient
from flexinfer_controller.core.activation_trace import SPAN_NAME, ActivationTraces
from flexinfer_controller.testing import (
    eventually,
    fake_model_dir,
    kill_engines,
    model_doc,
    run_controller,
)
from flexinfer_registry.app import create_app as registry_app
from flexinfer_registry.settings import RegistrySettings
from flexinfer_registry.testing.fakes import OneProvider, ScriptedProvider
from flexinfer_testing.traces import assert_server_child, recording_provider, wait_for_spans

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
REQUEST_SPAN = "00f067aa0ba902b7"


async def test_a_traced_demand_yields_a_scale_up_span_in_the_requests_trace(
    tmp_path: Path,
) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    async with run_controller(tmp_path) as h:
        h.app.state.controller.activations = ActivationTraces(provider.get_tracer("test"))
        weights = fake_model_dir(tmp_path / "weights")
        doc = model_doc("tiny", weights.as_uri(), idle_timeout="60s")
        assert (await h.client.put("/v1/admin/models/tiny", json=doc)).status_code == 201
        await h.wait_phase("tiny", "Idle")
        demand = topics.DemandEvent(
            model="default/tiny",
            queue_depth=1,
            since=datetime.now(UTC),
            proxy="test",
            traceparent=f"00-{TRACE_ID}-{REQUEST_SPAN}-01",
        )
        await h.publish(topics.DEMAND, demand)
        await h.endpoints_event("default/tiny", timeout_s=30, count=1)
        await eventually(lambda: len(exporter.get_finished_spans()) == 1)
        assert (await h.client.delete("/v1/admin/models/tiny")).status_code == 204
        await h.endpoints_event("default/tiny", count=0)
    [span] = exporter.get_finished_spans()
    assert span.name == SPAN_NAME
    assert format(span.context.trace_id, "032x") == TRACE_ID
    assert span.parent is not None
    assert format(span.parent.span_id, "016x") == REQUEST_SPAN
    assert span.status.is_ok
    assert kill_engines(tmp_path) == []


async def test_registry_calls_join_the_controllers_trace(tmp_path: Path) -> None:
    """The controller's registry client sends its current span's traceparent: the traced
    registry's spans of EnsureModelDownloaded and StreamModelFiles are that span's children."""
    server_spans = InMemorySpanExporter()
    settings = RegistrySettings(
        port=0,
        grpc_port=0,
        cache_dir=tmp_path / "cache",
        telemetry=TelemetrySettings(otel_enabled=True),
    )
    files = {"config.json": b"{}", "model.safetensors": b"w" * 10_000}
    provider = OneProvider(ScriptedProvider(files))
    app: Any = registry_app(settings, providers=provider, span_exporter=server_spans)
    tracer = recording_provider()[0].get_tracer("controller")
    async with serve_in_background(app):
        client = RegistryClient(
            str(app.state.grpc_address), token=None, call_timeout_s=10, stream_timeout_s=60
        )
        ref = ModelRef.of("hf://org/model")
        try:
            with tracer.start_as_current_span("ensure cache") as caller:
                updates = [u async for u in client.ensure(ref)]
                chunks = [c async for c in client.stream_files(ref, chunk_size=4096)]
        finally:
            await client.close()
        assert updates[-1].status == DOWNLOADED
        assert {c.relative_path for c in chunks} == set(files)
        for name in ("EnsureModelDownloaded", "StreamModelFiles"):
            method = f"model_express.model.ModelService/{name}"
            [span] = await asyncio.to_thread(wait_for_spans, server_spans, method)
            assert_server_child(span, caller.get_span_context())
