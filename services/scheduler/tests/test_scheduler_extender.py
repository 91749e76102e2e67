"""The extender protocol over HTTP (ASGI): JSON tags, old capitalised names, both modes."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from flexinfer_common.placement import (
    IgnoreMalformed,
    InMemoryBenchmarks,
    InMemoryTenantPods,
    PlacementWeights,
    PodFacts,
    benchmark_key,
    keys,
    node_facts,
)
from flexinfer_scheduler.app import create_app
from flexinfer_scheduler.core.nodes import NodeCache
from flexinfer_scheduler.settings import SchedulerSettings
from flexinfer_testing.scrape import check_conventions, check_families, sample_value, scrape

GPU_LABELS = {keys.GPU_VENDOR: "NVIDIA", keys.GPU_ARCH: "sm_89", keys.GPU_VRAM: "24Gi"}


def node_obj(name: str, labels: dict[str, str], annotations: dict[str, str]) -> dict[str, Any]:
    """A v1.Node as kube-scheduler sends it."""
    return {"metadata": {"name": name, "labels": labels, "annotations": annotations}}


NODES = [
    node_obj("fast", GPU_LABELS, {keys.GPU_FREE_MEMORY: "24576", keys.GPU_UTIL: "10"}),
    node_obj("busy", GPU_LABELS, {keys.GPU_FREE_MEMORY: "12288", keys.GPU_UTIL: "90"}),
    node_obj("full", GPU_LABELS, {keys.GPU_FREE_MEMORY: "1000"}),
    node_obj("cpu", {}, {}),
]
POD = {
    "metadata": {
        "name": "engine-0",
        "namespace": "ns",
        "annotations": {keys.VRAM_ESTIMATE_MB: "4000", keys.BACKEND: "vllm", keys.MODEL: "m"},
    },
    "spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
}


def cache() -> NodeCache:
    """The node cache holding NODES."""
    sink = IgnoreMalformed()
    return NodeCache(
        node_facts(
            n["metadata"]["name"], n["metadata"]["labels"], n["metadata"]["annotations"], sink
        )
        for n in NODES
    )


def client(**kwargs: Any) -> httpx.AsyncClient:
    """An ASGI client of a scheduler with the given sources."""
    app = create_app(SchedulerSettings(port=0), nodes=cache(), **kwargs)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://sched")


async def test_filter_with_node_names_answers_current_tags() -> None:
    async with client() as http:
        answer = await http.post(
            "/filter", json={"pod": POD, "nodenames": ["fast", "busy", "full", "cpu", "gone"]}
        )
    assert answer.status_code == 200
    body = answer.json()
    assert body["nodenames"] == ["fast", "busy"]
    assert body["failedNodes"] == {
        "full": "Insufficient VRAM: 1000 MB free, 4000 MB needed (4000 MB x 1 GPU)",
        "cpu": "No vendor label",
        "gone": "Unknown node: not in the extender's node cache",
    }
    assert body["failedAndUnresolvableNodes"] == {}
    assert "nodes" not in body


async def test_filter_and_score_are_timed_and_rejections_counted_by_reason() -> None:
    async with client() as http:
        names = ["fast", "busy", "full", "cpu", "gone"]
        await http.post("/filter", json={"pod": POD, "nodenames": names})
        await http.post("/prioritize", json={"pod": POD, "nodenames": ["fast", "busy"]})
        families = await scrape(http)
    check_families(
        families,
        {
            "flexinfer_scheduler_extender_duration_seconds": {"verb"},
            "flexinfer_scheduler_rejections": {"reason"},
            "http_requests": {"handler", "method", "status"},
        },
    )
    check_conventions(families)
    timed = "flexinfer_scheduler_extender_duration_seconds_count"
    assert sample_value(families, timed, verb="filter") == 1
    assert sample_value(families, timed, verb="prioritize") == 1
    reasons = {
        s.labels["reason"]: s.value
        for s in families["flexinfer_scheduler_rejections"].samples
        if s.name.endswith("_total")
    }
    # One node per failing filter (VRAM, vendor), and the node nobody knows.
    assert sum(reasons.values()) == 3
    assert reasons["UnknownNode"] == 1


async def test_filter_with_node_objects_answers_the_passing_objects() -> None:
    async with client() as http:
        body = (await http.post("/filter", json={"pod": POD, "nodes": {"items": NODES}})).json()
    assert [n["metadata"]["name"] for n in body["nodes"]["items"]] == ["fast", "busy"]
    assert body["nodenames"] == ["fast", "busy"]


async def test_old_capitalised_names_are_accepted() -> None:
    async with client() as http:
        body = (await http.post("/filter", json={"Pod": POD, "NodeNames": ["fast", "cpu"]})).json()
        scores = await http.post("/prioritize", json={"POD": POD, "Nodes": {"Items": NODES}})
    assert body["nodenames"] == ["fast"]
    assert {"host", "score"} == set(scores.json()[0])


@pytest.mark.parametrize("path", ["/prioritize", "/score"])
async def test_prioritize_scores_zero_to_ten(path: str) -> None:
    key = benchmark_key("vllm", "m", "vendor=NVIDIA,arch=sm_89,vram=24Gi,count=,int4=")
    benchmarks = InMemoryBenchmarks({"ns": {key: "20"}})
    async with client(benchmarks=benchmarks) as http:
        answer = await http.post(path, json={"pod": POD, "nodenames": ["fast", "busy", "gone"]})
    assert answer.status_code == 200
    # fast: 14 - 2 + 10 = 22; busy: 14 - 18 + 5 = 1; min-max onto 0..10; unknown 0.
    assert answer.json() == [
        {"host": "fast", "score": 10},
        {"host": "busy", "score": 0},
        {"host": "gone", "score": 0},
    ]


async def test_tenant_fair_share_is_applied_when_enabled() -> None:
    weights = PlacementWeights(tenant_fairshare_enabled=True)
    app = create_app(
        SchedulerSettings(port=0, weights=weights),
        nodes=cache(),
        tenants=InMemoryTenantPods([PodFacts(namespace="ns", name="x", gpu_count=2)]),
    )
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://s") as http:
        assert (await http.post("/prioritize", json={"pod": POD, "nodenames": ["fast"]})).json()
        metrics = (await http.get("/metrics")).text
    # used 3 GPUs of a quota of 1: (1 - 3) x 5
    assert (
        'flexinfer_scheduler_tenant_score_adjustment{namespace="ns",tenant="ns"} -10.0' in metrics
    )


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"not json", "not JSON"),
        (b"[]", "must be an ExtenderArgs object"),
        (b'{"nodenames": []}', "pod must be an object"),
        (b'{"pod": {}}', "neither nodes nor nodenames"),
        (b'{"pod": {}, "nodenames": [1]}', "nodenames must be an array of strings"),
        (b'{"pod": {"metadata": {"labels": {"a": 1}}}, "nodenames": []}', "strings to strings"),
        (b'{"pod": {}, "nodes": {"items": [{"metadata": {"name": 5}}]}}', "must be a string"),
    ],
)
async def test_bad_input_is_a_400_with_a_json_body(body: bytes, message: str) -> None:
    async with client() as http:
        answer = await http.post("/filter", content=body)
    assert answer.status_code == 400
    assert message in answer.json()["error"]["message"]


async def test_malformed_values_are_counted_not_fatal() -> None:
    pod = {"metadata": {"annotations": {keys.VRAM_ESTIMATE_MB: "lots"}}}
    nodes = [node_obj("n", GPU_LABELS, {keys.GPU_UTIL: "high"})]
    async with client() as http:
        body = (await http.post("/filter", json={"pod": pod, "nodes": {"items": nodes}})).json()
        metrics = (await http.get("/metrics")).text
    assert body["nodenames"] == ["n"]
    assert f'flexinfer_scheduler_malformed_values_total{{key="{keys.GPU_UTIL}"}} 1.0' in metrics
    assert f'key="{keys.VRAM_ESTIMATE_MB}"' in metrics


async def test_extender_open_leaves_only_the_verbs_unguarded() -> None:
    settings = SchedulerSettings(port=0, auth_token=SecretStr("t" * 32), extender_open=True)
    app = create_app(settings, nodes=cache())
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://s") as http:
        assert (await http.post("/filter", json={"pod": POD, "nodenames": []})).status_code == 200
        guarded = create_app(SchedulerSettings(port=0, auth_token=SecretStr("t" * 32)))
        g = httpx.ASGITransport(app=guarded)
        async with httpx.AsyncClient(transport=g, base_url="http://s") as closed:
            assert (await closed.post("/filter", json={})).status_code == 401
