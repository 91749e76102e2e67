"""Traces of proxied requests, read back from the in-memory span exporter: one connected
trace per request, the client's traceparent validated before it is a parent, and a
traceparent of the proxy's own (never the client's bytes) sent to the engine and on the
cold start's demand."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from flexinfer_common.bus import topics
from flexinfer_common.bus.topics import DemandEvent
from flexinfer_common.logcontext import JsonFormatter
from flexinfer_common.trace_context import parent_context
from flexinfer_proxy.testing import make_model
from flexinfer_proxy.testing_stack import proxy_stack, upstreams, wait_until

CHAT = "/v1/chat/completions"
BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"
CLIENT_TRACEPARENT = f"00-{TRACE_ID}-{CLIENT_SPAN}-01"
TRACING = {"telemetry": {"otel_enabled": True}}


def by_name(spans: tuple[ReadableSpan, ...]) -> dict[str, ReadableSpan]:
    """The finished spans by name (each name once per request here)."""
    named = {span.name: span for span in spans}
    assert len(named) == len(spans), [s.name for s in spans]
    return named


async def test_one_cold_request_is_one_connected_trace(tmp_path: Path) -> None:
    exporter = InMemorySpanExporter()
    async with (
        upstreams(1) as [(fake, url)],
        proxy_stack(tmp_path, [make_model("m")], span_exporter=exporter, **TRACING) as stack,
        httpx.AsyncClient(base_url=stack.url, timeout=30) as client,
    ):
        demands = stack.bus.consumer(topics.DEMAND, "trace-test", "t")
        headers = {"traceparent": CLIENT_TRACEPARENT}
        cold = asyncio.create_task(client.post(CHAT, json=BODY, headers=headers))
        [message] = await demands.fetch(timeout_s=10)
        demand = DemandEvent.model_validate(message.payload)
        await stack.set_endpoints("default/m", [url])
        assert (await cold).status_code == 200
        await wait_until(lambda: len(exporter.get_finished_spans()) == 4)

    spans = by_name(exporter.get_finished_spans())
    assert set(spans) == {"POST /v1/chat/completions", "resolve model", "queue wait", "upstream"}
    server = spans["POST /v1/chat/completions"]
    assert {format(s.context.trace_id, "032x") for s in spans.values()} == {TRACE_ID}
    assert server.parent is not None
    assert format(server.parent.span_id, "016x") == CLIENT_SPAN
    for name in ("resolve model", "queue wait", "upstream"):
        parent = spans[name].parent
        assert parent is not None, name
        assert parent.span_id == server.context.span_id, name
    assert server.attributes is not None
    assert server.attributes["flexinfer.model"] == "default/m"
    assert server.attributes["http.response.status_code"] == 200
    # The engine's parent is the proxy's upstream span, in the header the proxy built.
    upstream = spans["upstream"].context
    sent = fake.seen[0].headers["traceparent"]
    assert sent == f"00-{TRACE_ID}-{upstream.span_id:016x}-01"
    # The cold start's demand carries the request's trace to the controller.
    assert demand.traceparent == f"00-{TRACE_ID}-{server.context.span_id:016x}-01"


@pytest.mark.parametrize(
    "value",
    [
        "00-" + "0" * 32 + "-00f067aa0ba902b7-01",  # all-zero trace id
        "00-4bf92f3577b34da6a3ce929d0e0e4736-" + "0" * 16 + "-01",  # all-zero span id
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  # forbidden version
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",  # upper case
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",  # v00 has 4 fields
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\r\nx: y",
        "garbage",
    ],
)
async def test_an_invalid_client_traceparent_starts_a_new_trace(tmp_path: Path, value: str) -> None:
    assert parent_context(value.encode()) is None
    exporter = InMemorySpanExporter()
    async with (
        upstreams(1) as [(fake, url)],
        proxy_stack(tmp_path, [make_model("m")], span_exporter=exporter, **TRACING) as stack,
        httpx.AsyncClient(base_url=stack.url) as client,
    ):
        await stack.set_endpoints("default/m", [url])
        if "\r" not in value:  # httpx refuses to send a line break; the parser is checked
            reply = await client.post(CHAT, json=BODY, headers={"traceparent": value})
            assert reply.status_code == 200
            await wait_until(lambda: len(exporter.get_finished_spans()) == 3)
            server = by_name(exporter.get_finished_spans())["POST /v1/chat/completions"]
            assert server.parent is None
            sent = fake.seen[0].headers["traceparent"]
            assert sent != value
            assert sent.startswith(f"00-{server.context.trace_id:032x}-")


def test_a_later_version_is_read_by_its_first_four_fields() -> None:
    value = f"cc-{TRACE_ID}-{CLIENT_SPAN}-01-what-comes-later".encode()
    assert parent_context(value) is not None


async def test_without_tracing_the_client_header_passes_through(tmp_path: Path) -> None:
    async with (
        upstreams(1) as [(fake, url)],
        proxy_stack(tmp_path, [make_model("m")]) as stack,
        httpx.AsyncClient(base_url=stack.url) as client,
    ):
        await stack.set_endpoints("default/m", [url])
        reply = await client.post(CHAT, json=BODY, headers={"traceparent": CLIENT_TRACEPARENT})
        assert reply.status_code == 200
    assert fake.seen[0].headers["traceparent"] == CLIENT_TRACEPARENT


async def test_a_requests_log_lines_carry_its_model_request_id_and_trace(
    tmp_path: Path,
) -> None:
    exporter = InMemorySpanExporter()
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("flexinfer_proxy.pipeline")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    limits: dict[str, Any] = {"model_rate_limit_rps": 0.001, "model_rate_limit_burst": 1}
    try:
        async with (
            upstreams(1) as [(_, url)],
            proxy_stack(
                tmp_path, [make_model("m")], span_exporter=exporter, **TRACING, **limits
            ) as stack,
            httpx.AsyncClient(base_url=stack.url) as client,
        ):
            await stack.set_endpoints("default/m", [url])
            assert (await client.post(CHAT, json=BODY)).status_code == 200
            headers = {"traceparent": CLIENT_TRACEPARENT, "x-request-id": "req-42"}
            assert (await client.post(CHAT, json=BODY, headers=headers)).status_code == 429
            bad = {"x-request-id": "two words"}  # not a plain ID: left out of the line
            assert (await client.post(CHAT, json=BODY, headers=bad)).status_code == 429
    finally:
        logger.removeHandler(handler)
    first, second = [json.loads(line) for line in out.getvalue().splitlines()]
    assert first["message"].startswith("answering 429")
    assert first["model"] == "default/m"
    assert first["request_id"] == "req-42"
    assert first["trace_id"] == TRACE_ID
    assert "request_id" not in second


async def test_an_unsampled_request_makes_no_spans_but_still_propagates(tmp_path: Path) -> None:
    exporter = InMemorySpanExporter()
    async with (
        upstreams(1) as [(fake, url)],
        proxy_stack(tmp_path, [make_model("m")], span_exporter=exporter, **TRACING) as stack,
        httpx.AsyncClient(base_url=stack.url) as client,
    ):
        await stack.set_endpoints("default/m", [url])
        unsampled = f"00-{TRACE_ID}-{CLIENT_SPAN}-00"  # the client's trace is not sampled
        reply = await client.post(CHAT, json=BODY, headers={"traceparent": unsampled})
        assert reply.status_code == 200
    assert exporter.get_finished_spans() == ()
    sent = fake.seen[0].headers["traceparent"]
    assert sent.startswith(f"00-{TRACE_ID}-")
    assert sent.endswith("-00")
    assert sent != unsampled
