"""The verbs' fast path answers exactly as the FastAPI routes did: bodies, statuses, headers,
errors, auth and the request metrics."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from pydantic import SecretStr

from flexinfer_common.errors import TemporaryError
from flexinfer_common.placement import (
    BenchmarkResults,
    IgnoreMalformed,
    Malformed,
    PodFacts,
    keys,
    node_facts,
)
from flexinfer_scheduler.app import create_app
from flexinfer_scheduler.core.nodes import NodeCache
from flexinfer_scheduler.settings import SchedulerSettings
from flexinfer_scheduler.verbs import VerbsFastPath
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


def classes(app: FastAPI) -> list[object]:
    """The app's middleware classes, outermost first."""
    return [m.cls for m in app.user_middleware]


def routes_only(app: FastAPI) -> FastAPI:
    """``app`` without its fast path: the verbs answered by the FastAPI routes."""
    keep = [cls is not VerbsFastPath for cls in classes(app)]
    app.user_middleware = [m for m, kept in zip(app.user_middleware, keep, strict=True) if kept]
    return app


def client(app: FastAPI, token: str | None = None) -> httpx.AsyncClient:
    """An ASGI client of ``app``."""
    headers = {"Authorization": f"Bearer {token}"} if token else None
    transport = httpx.ASGITransport(app=app)
    return httpx.AsyncClient(transport=transport, base_url="http://sched", headers=headers)


async def answers(app: FastAPI, token: str | None = None) -> list[tuple[int, str, bytes]]:
    """Status, content type and body of each of REQUESTS."""
    out = []
    async with client(app, token) as http:
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
            out.append((response.status_code, content_type, response.content))
    return out


def test_the_fast_path_is_the_innermost_middleware() -> None:
    # Innermost: auth, the request metrics and tracing wrap it as they wrap the routes.
    app = create_app(SchedulerSettings(port=0, auth_token=SecretStr("t" * 32)))
    assert classes(app)[-1] is VerbsFastPath
    assert VerbsFastPath not in classes(app)[:-1]
    other = create_app(SchedulerSettings(port=0, auth_token=SecretStr("t" * 32)))
    assert classes(routes_only(other)) == classes(app)[:-1]


@pytest.mark.parametrize("token", [None, "sched-token-0123456789abcdef"])
async def test_fast_path_answers_as_the_routes_do(token: str | None) -> None:
    settings = SchedulerSettings(port=0, auth_token=SecretStr(token) if token else None)
    fast = await answers(create_app(settings, nodes=cache()), token)
    routed = await answers(routes_only(create_app(settings, nodes=cache())), token)
    assert fast == routed
    assert [status for status, _, _ in fast] == [200, 200, 200, 400, 400, 400, 405, 307]
    if token:
        unauthorised = await answers(create_app(settings, nodes=cache()))
        assert {status for status, _, _ in unauthorised} == {401}


class FailingBenchmarks:
    """A benchmark source whose reads fail as an unreachable store's do."""

    async def results(self, pod: PodFacts, sink: Malformed) -> BenchmarkResults:
        """Always raises TemporaryError."""
        raise TemporaryError("benchmarks unavailable", delay=3)


async def test_a_flexinfer_error_gets_the_apps_error_answer() -> None:
    settings = SchedulerSettings(port=0)
    out = []
    for app in (
        create_app(settings, nodes=cache(), benchmarks=FailingBenchmarks()),
        routes_only(create_app(settings, nodes=cache(), benchmarks=FailingBenchmarks())),
    ):
        async with client(app) as http:
            response = await http.post("/prioritize", json={"pod": POD, "nodenames": NAMES})
        out.append((response.status_code, response.headers.get("retry-after"), response.json()))
    assert out[0] == out[1]
    assert out[0][:2] == (503, "3")
    assert out[0][2]["error"]["message"] == "benchmarks unavailable"


async def test_the_request_metrics_count_the_verbs() -> None:
    async with client(create_app(SchedulerSettings(port=0), nodes=cache())) as http:
        await http.post("/filter", json={"pod": POD, "nodenames": NAMES})
        await http.post("/score", content=b"[]")
        families = await scrape(http)
    total = "http_requests_total"
    assert sample_value(families, total, handler="/filter", method="POST", status="200") == 1
    assert sample_value(families, total, handler="/score", method="POST", status="400") == 1
