"""A traced cold start: the controller's scale-up span joins the demanding request's trace."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from flexinfer_common.bus import topics
from flexinfer_controller.core.activation_trace import SPAN_NAME, ActivationTraces
from flexinfer_controller.testing import (
    eventually,
    fake_model_dir,
    kill_engines,
    model_doc,
    run_controller,
)

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
