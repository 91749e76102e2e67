"""The apiserver side against the in-process fake apiserver: the node informer feeding
nodeCacheCapable requests, the benchmark ConfigMaps, and the namespace's pods."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator

import anyio.to_thread
import httpx
import pytest

from flexinfer_common.lifespan import AppLifespan
from flexinfer_common.placement import PlacementWeights, benchmark_key, keys
from flexinfer_common.testing.kube_apiserver import KubeApiServer
from flexinfer_common.testing.kube_apiserver.fixtures import kube_apiserver_fixture
from flexinfer_scheduler.app import create_app
from flexinfer_scheduler.core.nodes import NodeCache
from flexinfer_scheduler.settings import SchedulerSettings
from flexinfer_testing.clients import wait_until

kube_apiserver = kube_apiserver_fixture()
LABELS = {keys.GPU_VENDOR: "AMD", keys.GPU_ARCH: "gfx1100", keys.GPU_VRAM: "24Gi"}
DEVICE = "vendor=AMD,arch=gfx1100,vram=24Gi,count=,int4="
POD = {
    "metadata": {
        "name": "engine-0",
        "namespace": "ns",
        "labels": {"modeldeployment_cr": "md"},
        "annotations": {keys.BACKEND: "vllm", keys.MODEL: "m"},
    },
    "spec": {"containers": [{"resources": {"limits": {"amd.com/gpu": "1"}}}]},
}


def node(name: str, labels: dict[str, str], annotations: dict[str, str]) -> dict[str, object]:
    """A Node object to create."""
    return {"metadata": {"name": name, "labels": labels, "annotations": annotations}}


@pytest.fixture
async def scheduler(
    kube_apiserver: KubeApiServer,
) -> AsyncIterator[tuple[httpx.AsyncClient, NodeCache]]:
    """A scheduler reading the fake apiserver, its lifespan started and its nodes synced."""
    kube_apiserver.create("nodes", node("a", LABELS, {keys.GPU_FREE_MEMORY: "20000"}))
    kube_apiserver.create("nodes", node("b", LABELS, {keys.GPU_FREE_MEMORY: "20000"}))
    kube_apiserver.create("nodes", node("cpu", {}, {}))
    settings = SchedulerSettings(
        port=0,
        kubernetes=True,
        kubernetes_host=kube_apiserver.url,
        weights=PlacementWeights(tenant_fairshare_enabled=True),
    )
    cache = NodeCache()
    app = create_app(settings, nodes=cache)
    lifespan = AppLifespan("scheduler", app)
    await lifespan.startup()
    try:
        await app.state.extender_state["synced"].wait()
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://s") as http:
            yield http, cache
    finally:
        await lifespan.shutdown()


async def test_node_names_resolve_through_the_informer(
    scheduler: tuple[httpx.AsyncClient, NodeCache], kube_apiserver: KubeApiServer
) -> None:
    http, cache = scheduler
    assert (await http.get("/readyz")).status_code == 200
    body = (await http.post("/filter", json={"pod": POD, "nodenames": ["a", "b", "cpu"]})).json()
    assert body["nodenames"] == ["a", "b"]
    assert body["failedNodes"] == {"cpu": "No vendor label"}
    # A watch event (the agent relabels b) reaches the cache without a relist.
    kube_apiserver.patch("nodes", None, "b", {"metadata": {"labels": {keys.GPU_ARCH: "gfx906"}}})
    await anyio.to_thread.run_sync(
        functools.partial(
            wait_until, lambda: getattr(cache.get("b"), "arch", None) == "gfx906", 10, "b's arch"
        )
    )
    body = (await http.post("/filter", json={"pod": POD, "nodenames": ["a", "b"]})).json()
    assert body["failedNodes"] == {"b": "Unsupported arch: backend vllm does not run on amd gfx906"}
    kube_apiserver.delete("nodes", None, "a")
    await anyio.to_thread.run_sync(
        functools.partial(wait_until, lambda: cache.get("a") is None, 10, "a's deletion")
    )


async def test_tps_comes_from_the_configmaps_in_order(
    scheduler: tuple[httpx.AsyncClient, NodeCache], kube_apiserver: KubeApiServer
) -> None:
    http, cache = scheduler
    kube_apiserver.create("namespaces", {"metadata": {"name": "ns"}})
    # Only the per-deployment result: every node gets it, the same score.
    kube_apiserver.create(
        "configmaps",
        {"metadata": {"name": "md-benchmark-results"}, "data": {"tokensPerSecond": "10"}},
        "ns",
    )
    args = {"pod": POD, "nodenames": ["a", "b"]}
    assert (await http.post("/prioritize", json=args)).json() == [
        {"host": "a", "score": 10},
        {"host": "b", "score": 10},
    ]
    # The global table wins for the device class it names; b's class differs after relabel.
    kube_apiserver.create(
        "configmaps",
        {
            "metadata": {"name": "flexinfer-benchmark-results"},
            "data": {benchmark_key("vllm", "m", DEVICE): "100"},
        },
        "ns",
    )
    kube_apiserver.patch("nodes", None, "b", {"metadata": {"labels": {keys.GPU_VRAM: "16Gi"}}})
    await anyio.to_thread.run_sync(
        functools.partial(
            wait_until,
            lambda: "16Gi" in getattr(cache.get("b"), "device_class", ""),
            10,
            "b's vram",
        )
    )
    scores = (await http.post("/prioritize", json=args)).json()
    assert scores == [{"host": "a", "score": 10}, {"host": "b", "score": 0}]
    metrics = (await http.get("/metrics")).text
    assert 'flexinfer_scheduler_tenant_usage_ratio{namespace="ns",tenant="ns"} 1.0' in metrics
