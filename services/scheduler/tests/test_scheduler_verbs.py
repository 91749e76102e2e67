"""The verbs' pipeline (served without ASGI on flexinfer_common.http1) answers exactly as the
FastAPI routes do: bodies, statuses, headers, errors, auth and the request metrics; and it
holds request bodies to a size and a time limit."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from pydantic import SecretStr

from flexinfer_common.errors import TemporaryError
from flexinfer_common.http1.server import HttpProtocol
from flexinfer_common.placement import (
    BenchmarkResults,
    IgnoreMalformed,
    Malformed,
    PodFacts,
    keys,
    node_facts,
)
from flexinfer_common.serving import serve_in_background
from flexinfer_common.settings import TelemetrySettings
from flexinfer_scheduler.app import create_app
from flexinfer_scheduler.core.nodes import NodeCache
from flexinfer_scheduler.settings import SchedulerSettings
from flexinfer_testing.scrape import sample_value, scrape

GPU = {keys.GPU_VENDOR: "NVIDIA", keys.GPU_ARCH: "sm_89", keys.GPU_VRAM: "24Gi"}
POD = {
    "metadata": {
        "name": "engine-0",
        "namespace": "ns",
        "annotations": {keys.VRAM_ESTIMATE_MB: "4000", keys.BACKEND: "vllm", keys.MODEL: "m"},
    },
    "spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
}


def cache() -> NodeCache:
    """Four nodes: two fit, one too full, one without a GPU."""
    sink = IgnoreMalformed()
    return NodeCache(
        [
            node_facts("fast", GPU, {keys.GPU_FREE_MEMORY: "24576", keys.GPU_UTIL: "10"}, sink),
            node_facts("busy", GPU, {keys.GPU_FREE_MEMORY: "12288", keys.GPU_UTIL: "90"}, sink),
            node_facts("full", GPU, {keys.GPU_FREE_MEMORY: "1000"}, sink),
            node_facts("cpu", {}, {}, sink),
        ]
    )


NAMES = ["fast", "busy", "full", "cpu", "gone"]
REQUESTS: list[tuple[str, str, Any]] = [
    ("POST", "/filter", {"pod": POD, "nodenames": NAMES}),
    ("POST", "/prioritize", {"pod": POD, "nodenames": NAMES}),
    ("POST", "/score", {"Pod": POD, "NodeNames": NAMES}),
    ("POST", "/filter", b"{not json"),
    ("POST", "/prioritize", {"nodenames": NAMES}),
    ("POST", "/score", {"pod": POD, "nodenames": [1]}),
    ("GET", "/filter", None),
    ("POST", "/filter/", {"pod": POD, "nodenames": NAMES}),
]


@asynccontextmanager
async def served(app: FastAPI, *, pipeline: bool = True) -> AsyncIterator[str]:
    """``app`` on a real socket: on our protocol, which serves the verbs through the app's
    pipeline, or (``pipeline=False``) on uvicorn's own, where only the routes answer."""
    async with serve_in_background(app, http=HttpProtocol if pipeline else None) as url:
        yield url


def client(url: str, token: str | None = None) -> httpx.AsyncClient:
    """An HTTP client of ``url``."""
    headers = {"Authorization": f"Bearer {token}"} if token else None
    return httpx.AsyncClient(base_url=url, headers=headers)


async def answers(
    app: FastAPI, token: str | None = None, *, pipeline: bool = True
) -> list[tuple[int, str, str | None, bytes]]:
    """Status, content type, WWW-Authenticate and body of each of REQUESTS."""
    out = []
    async with served(app, pipeline=pipeline) as url, client(url, token) as http:
        for method, path, body in REQUESTS:
            content = body if isinstance(body, bytes) else None
            response = await http.request(
                method,
                path,
                json=body if not isinstance(body, bytes) else None,
                content=content,
                follow_redirects=False,
            )
            content_type = response.headers.get("content-type", "")
            challenge = response.headers.get("www-authenticate")
            out.append((response.status_code, content_type, challenge, response.content))
    return out


def test_the_pipeline_takes_only_the_verbs_posts() -> None:
    pipeline = create_app(SchedulerSettings(port=0)).pipeline  # type: ignore[attr-defined]
    for path in (b"/filter", b"/prioritize", b"/score", b"/filter?x=1"):
        assert pipeline.handles("POST", path)
    for method, path in [("GET", b"/filter"), ("POST", b"/filter/"), ("POST", b"/healthz")]:
        assert not pipeline.handles(method, path)


async def test_with_tracing_on_each_verb_gets_a_server_span_under_a_valid_parent() -> None:
    exporter = InMemorySpanExporter()
    token = "sched-token-0123456789abcdef"
    telemetry = TelemetrySettings(otel_enabled=True)
    settings = SchedulerSettings(port=0, telemetry=telemetry, auth_token=SecretStr(token))
    app = create_app(settings, nodes=cache(), span_exporter=exporter)
    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    args = {"pod": POD, "nodenames": NAMES}
    async with served(app) as url, client(url, token) as http:
        await http.post("/filter", json=args, headers={"traceparent": parent})
        await http.post("/prioritize", json=args, headers={"traceparent": "00-zz-bad"})
        await http.post("/score", json=args, headers={"Authorization": "Bearer wrong-token"})
    spans = {span.name: span for span in exporter.get_finished_spans()}
    assert set(spans) == {"POST /filter", "POST /prioritize", "POST /score"}
    child = spans["POST /filter"]
    assert child.kind is SpanKind.SERVER
    assert child.parent is not None
    assert f"{child.context.trace_id:032x}" == "0af7651916cd43dd8448eb211c80319c"
    assert spans["POST /prioritize"].parent is None  # a malformed parent starts a trace
    statuses = {
        name: (span.attributes or {}).get("http.response.status_code")
        for name, span in spans.items()
    }
    assert statuses == {"POST /filter": 200, "POST /prioritize": 200, "POST /score": 401}


@pytest.mark.parametrize("token", [None, "sched-token-0123456789abcdef"])
async def test_the_pipeline_answers_as_the_routes_do(token: str | None) -> None:
    settings = SchedulerSettings(port=0, auth_token=SecretStr(token) if token else None)
    fast = await answers(create_app(settings, nodes=cache()), token)
    routed = await answers(create_app(settings, nodes=cache()), token, pipeline=False)
    assert fast == routed
    assert [status for status, _, _, _ in fast] == [200, 200, 200, 400, 400, 400, 405, 307]
    if token:
        refused = await answers(create_app(settings, nodes=cache()))
        assert refused == await answers(create_app(settings, nodes=cache()), pipeline=False)
        assert {(status, challenge) for status, _, challenge, _ in refused} == {(401, "Bearer")}


async def test_open_verbs_need_no_token_while_the_rest_does() -> None:
    token = "sched-token-0123456789abcdef"
    settings = SchedulerSettings(port=0, auth_token=SecretStr(token), extender_open=True)
    async with served(create_app(settings, nodes=cache())) as url, client(url) as http:
        verb = await http.post("/filter", json={"pod": POD, "nodenames": NAMES})
        guarded = await http.get("/openapi.json")
    assert (verb.status_code, guarded.status_code) == (200, 401)


class FailingBenchmarks:
    """A benchmark source whose reads fail as an unreachable store's do."""

    async def results(self, pod: PodFacts, sink: Malformed) -> BenchmarkResults:
        """Always raises TemporaryError."""
        raise TemporaryError("benchmarks unavailable", delay=3)


async def test_a_flexinfer_error_gets_the_apps_error_answer() -> None:
    settings = SchedulerSettings(port=0)
    out = []
    for pipeline in (True, False):
        app = create_app(settings, nodes=cache(), benchmarks=FailingBenchmarks())
        async with served(app, pipeline=pipeline) as url, client(url) as http:
            response = await http.post("/prioritize", json={"pod": POD, "nodenames": NAMES})
        out.append((response.status_code, response.headers.get("retry-after"), response.json()))
    assert out[0] == out[1]
    assert out[0][:2] == (503, "3")
    assert out[0][2]["error"]["message"] == "benchmarks unavailable"


async def test_the_request_metrics_count_the_verbs() -> None:
    app = create_app(SchedulerSettings(port=0), nodes=cache())
    async with served(app) as url, client(url) as http:
        sent = await http.post("/filter", json={"pod": POD, "nodenames": NAMES})
        await http.post("/score", content=b"[]")
        families = await scrape(http)
    total = "http_requests_total"
    assert sample_value(families, total, handler="/filter", method="POST", status="200") == 1
    assert sample_value(families, total, handler="/score", method="POST", status="400") == 1
    size = "http_request_size_bytes_sum"
    assert sample_value(families, size, handler="/filter") == len(sent.request.content)
    answered = "http_response_size_bytes_sum"
    assert sample_value(families, answered, handler="/filter") == len(sent.content)
    duration = "http_request_duration_seconds_count"
    assert sample_value(families, duration, handler="/filter", method="POST") == 1


async def test_a_body_in_pieces_is_read_whole() -> None:
    # Beyond the protocol's 64 KiB buffer and chunked: read through the pipeline's receive.
    names = NAMES + [f"node-{i:06d}" for i in range(8000)]
    payload = json.dumps({"pod": POD, "nodenames": names}).encode()

    async def pieces() -> AsyncIterator[bytes]:
        for at in range(0, len(payload), 16384):
            yield payload[at : at + 16384]

    out = []
    for pipeline in (True, False):
        app = create_app(SchedulerSettings(port=0), nodes=cache())
        async with served(app, pipeline=pipeline) as url, client(url) as http:
            response = await http.post("/prioritize", content=pieces())
        out.append((response.status_code, response.content))
    assert out[0] == out[1]
    assert out[0][0] == 200
    assert len(json.loads(out[0][1])) == len(names)


@pytest.mark.parametrize("chunked", [False, True])
async def test_a_body_over_the_limit_is_refused(chunked: bool) -> None:
    settings = SchedulerSettings(port=0, max_body_bytes=2048)
    payload = json.dumps({"pod": POD, "nodenames": [f"n{i:05d}" for i in range(400)]})

    async def pieces() -> AsyncIterator[bytes]:
        yield payload.encode()

    async with served(create_app(settings, nodes=cache())) as url, client(url) as http:
        response = await http.post("/filter", content=pieces() if chunked else payload)
        after = await http.post("/filter", json={"pod": POD, "nodenames": NAMES})
    assert response.status_code == 413
    assert response.json()["error"]["message"] == "request body exceeds 2048 bytes"
    assert after.status_code == 200  # the connection, or a new one, serves on


async def test_a_body_trickling_past_the_timeout_gets_408() -> None:
    settings = SchedulerSettings(port=0, body_timeout_s=0.3)
    async with served(create_app(settings, nodes=cache())) as url:
        host, port = url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(b"POST /filter HTTP/1.1\r\nHost: s\r\nContent-Length: 100\r\n\r\n{")
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(65536), timeout=30)
        writer.close()
    assert answer.startswith(b"HTTP/1.1 408 ")
    assert b"not received within 0.3s" in answer
