"""The apiserver side against the in-process fake apiserver: informers of Nodes, benchmark
ConfigMaps and Pods feeding decisions from memory, their watch updates, a relist on 410
Gone, and requests held until the first lists."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
import yaml

from flexinfer_common.lifespan import AppLifespan
from flexinfer_common.placement import PlacementWeights, benchmark_key, keys
from flexinfer_common.testing.kube_apiserver import KubeApiServer
from flexinfer_common.testing.kube_apiserver.fixtures import kube_apiserver_fixture
from flexinfer_scheduler.adapters.kube import KubeSources
from flexinfer_scheduler.app import create_app
from flexinfer_scheduler.settings import SchedulerSettings
from flexinfer_testing.repo import repo_root

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
Scheduler = tuple[httpx.AsyncClient, KubeSources]


def node(name: str, labels: dict[str, str], annotations: dict[str, str]) -> dict[str, object]:
    """A Node object to create."""
    return {"metadata": {"name": name, "labels": labels, "annotations": annotations}}


def configmap(name: str, data: dict[str, str]) -> dict[str, Any]:
    """A ConfigMap object to create."""
    return {"metadata": {"name": name}, "data": data}


@asynccontextmanager
async def started(api: KubeApiServer, **settings: Any) -> AsyncIterator[Scheduler]:
    """A scheduler reading ``api``, its lifespan started (not waiting for its informers)."""
    app = create_app(
        SchedulerSettings(port=0, kubernetes=True, kubernetes_host=api.url, **settings)
    )
    lifespan = AppLifespan("scheduler", app)
    await lifespan.startup()
    try:
        sources = app.state.sync_gate.sources
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://s") as http:
            yield http, sources
    finally:
        await lifespan.shutdown()


@pytest.fixture
async def scheduler(kube_apiserver: KubeApiServer) -> AsyncIterator[Scheduler]:
    """A scheduler with fair share on, its informers synced."""
    kube_apiserver.create("namespaces", {"metadata": {"name": "ns"}})
    kube_apiserver.create("nodes", node("a", LABELS, {keys.GPU_FREE_MEMORY: "20000"}))
    kube_apiserver.create("nodes", node("b", LABELS, {keys.GPU_FREE_MEMORY: "20000"}))
    kube_apiserver.create("nodes", node("cpu", {}, {}))
    weights = PlacementWeights(tenant_fairshare_enabled=True)
    async with started(kube_apiserver, weights=weights) as (http, sources):
        assert await sources.wait_synced(30)
        yield http, sources


async def test_node_names_resolve_through_the_informer(
    scheduler: Scheduler, kube_apiserver: KubeApiServer
) -> None:
    http, sources = scheduler
    assert (await http.get("/readyz")).status_code == 200
    body = (await http.post("/filter", json={"pod": POD, "nodenames": ["a", "b", "cpu"]})).json()
    assert body["nodenames"] == ["a", "b"]
    assert body["failedNodes"] == {"cpu": "No vendor label"}
    # A watch event (the agent relabels b) reaches the cache without a relist.
    kube_apiserver.patch("nodes", None, "b", {"metadata": {"labels": {keys.GPU_ARCH: "gfx906"}}})
    await sources.nodes.wait_until(lambda i: getattr(i.get("b"), "arch", None) == "gfx906")
    body = (await http.post("/filter", json={"pod": POD, "nodenames": ["a", "b"]})).json()
    assert body["failedNodes"] == {"b": "Unsupported arch: backend vllm does not run on amd gfx906"}
    kube_apiserver.delete("nodes", None, "a")
    await sources.nodes.wait_until(lambda i: i.get("a") is None)
    body = (await http.post("/filter", json={"pod": POD, "nodenames": ["a"]})).json()
    assert body["failedNodes"] == {"a": "Unknown node: not in the extender's node cache"}
    assert sources.nodes.lists == 1


async def test_the_startup_heap_is_frozen_once_the_informers_listed(
    kube_apiserver: KubeApiServer,
) -> None:
    # What the first lists built lives as long as the process: a full collection walking it
    # would show as p99 latency, so it leaves the collector's reach (gc.freeze) once synced.
    kube_apiserver.create("nodes", node("a", LABELS, {}))
    gc.unfreeze()  # whatever an earlier test in this process froze
    try:
        async with started(kube_apiserver) as (_, sources):
            assert await sources.wait_synced(30)
            deadline = asyncio.get_running_loop().time() + 30
            while gc.get_freeze_count() == 0:
                assert asyncio.get_running_loop().time() < deadline, "the heap was never frozen"
                await asyncio.sleep(0.01)
    finally:
        gc.unfreeze()


async def test_tps_comes_from_the_configmaps_in_order(
    scheduler: Scheduler, kube_apiserver: KubeApiServer
) -> None:
    http, sources = scheduler
    # Only the per-deployment result: every node gets it, the same score.
    kube_apiserver.create(
        "configmaps", configmap("md-benchmark-results", {"tokensPerSecond": "10"}), "ns"
    )
    await sources.configmaps.wait_until(lambda i: i.get("ns/md-benchmark-results") is not None)
    args = {"pod": POD, "nodenames": ["a", "b"]}
    assert (await http.post("/prioritize", json=args)).json() == [
        {"host": "a", "score": 10},
        {"host": "b", "score": 10},
    ]
    # The global table wins for the device class it names; b's class differs after relabel.
    table = {benchmark_key("vllm", "m", DEVICE): "100"}
    kube_apiserver.create("configmaps", configmap("flexinfer-benchmark-results", table), "ns")
    kube_apiserver.patch("nodes", None, "b", {"metadata": {"labels": {keys.GPU_VRAM: "16Gi"}}})
    await sources.nodes.wait_until(lambda i: "16Gi" in getattr(i.get("b"), "device_class", ""))
    await sources.configmaps.wait_until(lambda i: len(i.keys()) == 2)
    scores = (await http.post("/prioritize", json=args)).json()
    assert scores == [{"host": "a", "score": 10}, {"host": "b", "score": 0}]
    # The lookups kept for this pod's model end with the next ConfigMap change: a's entry
    # no longer parses, so a falls back to the deployment's TPS, as b does, and b's larger
    # free ratio (its 16Gi) ranks it first; kept lookups would still rank a first.
    (key,) = table
    kube_apiserver.patch("configmaps", "ns", "flexinfer-benchmark-results", {"data": {key: "?"}})
    await sources.configmaps.wait_until(
        lambda i: (i.get("ns/flexinfer-benchmark-results") or {}).get(key) == "?"
    )
    scores = (await http.post("/prioritize", json=args)).json()
    assert scores == [{"host": "a", "score": 0}, {"host": "b", "score": 10}]
    metrics = (await http.get("/metrics")).text
    assert 'flexinfer_scheduler_tenant_usage_ratio{namespace="ns",tenant="ns"} 1.0' in metrics
    # Decisions read memory: no ConfigMap or Pod call since the first lists and watches.
    assert kube_apiserver.count(verb="get", resource="configmaps") == 0
    assert kube_apiserver.count(verb="list", resource="pods") == 1


async def test_only_benchmark_configmaps_are_kept(
    scheduler: Scheduler, kube_apiserver: KubeApiServer
) -> None:
    _, sources = scheduler
    kube_apiserver.create("configmaps", configmap("unrelated", {"x": "1"}), "ns")
    kube_apiserver.create("configmaps", configmap("md-benchmark-results", {}), "ns")
    await sources.configmaps.wait_until(lambda i: i.get("ns/md-benchmark-results") is not None)
    assert sources.configmaps.keys() == ["ns/md-benchmark-results"]


async def test_tenant_pods_come_from_the_pod_informer(
    scheduler: Scheduler, kube_apiserver: KubeApiServer
) -> None:
    http, sources = scheduler
    other = {**POD, "metadata": {**POD["metadata"], "name": "engine-1"}}  # type: ignore[dict-item]
    kube_apiserver.create("pods", other, "ns")
    assert sources.pods is not None
    await sources.pods.wait_until(lambda i: i.get("ns/engine-1") is not None)
    assert (
        await http.post("/prioritize", json={"pod": POD, "nodenames": ["a"]})
    ).status_code == 200
    metrics = (await http.get("/metrics")).text
    # Two GPUs (the other pod's and this one's) of a quota of one.
    assert 'flexinfer_scheduler_tenant_usage_ratio{namespace="ns",tenant="ns"} 2.0' in metrics


async def test_a_410_relists_and_the_gap_is_reflected(
    scheduler: Scheduler, kube_apiserver: KubeApiServer
) -> None:
    http, sources = scheduler

    def gap() -> None:
        """Changes the watch misses, then a compaction that expires its resourceVersion."""
        kube_apiserver.patch(
            "nodes", None, "b", {"metadata": {"labels": {keys.GPU_ARCH: "gfx906"}}}
        )
        kube_apiserver.delete("nodes", None, "a")
        kube_apiserver.create("nodes", node("c", LABELS, {}))
        kube_apiserver.compact()

    kube_apiserver.after(gap, verb="watch", resource="nodes")
    kube_apiserver.drop_watches()
    await sources.nodes.wait_until(lambda i: i.lists == 2)
    body = (await http.post("/filter", json={"pod": POD, "nodenames": ["a", "b", "c"]})).json()
    assert body["nodenames"] == ["c"]
    assert body["failedNodes"] == {
        "a": "Unknown node: not in the extender's node cache",
        "b": "Unsupported arch: backend vllm does not run on amd gfx906",
    }


async def test_requests_wait_for_the_first_list_then_fail_clearly(
    kube_apiserver: KubeApiServer,
) -> None:
    kube_apiserver.create("nodes", node("a", LABELS, {}))
    kube_apiserver.inject(500, verb="list", resource="nodes", times=1000)
    async with started(kube_apiserver, sync_wait_s=0.2) as (http, _):
        await kube_apiserver.until(lambda s: s.count(verb="list", resource="nodes") >= 1)
        args = {"pod": POD, "nodenames": ["a"]}
        filtered = await http.post("/filter", json=args)
        assert filtered.status_code == 200
        assert filtered.json()["error"].startswith("the extender has not yet listed Nodes")
        assert filtered.json()["nodenames"] == []
        scored = await http.post("/prioritize", json=args)
        assert scored.status_code == 503
        assert scored.json()["error"]["code"] == "not_synced"
        assert (await http.get("/readyz")).status_code == 503


async def test_a_request_before_the_first_list_is_answered_once_it_completes(
    kube_apiserver: KubeApiServer,
) -> None:
    kube_apiserver.create("nodes", node("a", LABELS, {}))
    kube_apiserver.inject(500, verb="list", resource="nodes", times=1000)
    async with started(kube_apiserver, sync_wait_s=60) as (http, sources):
        args = {"pod": POD, "nodenames": ["a"]}
        waiting = asyncio.create_task(http.post("/filter", json=args))
        await kube_apiserver.until(lambda s: s.count(verb="list", resource="nodes") >= 2)
        assert not waiting.done()
        assert not sources.synced()
        kube_apiserver.clear_faults()
        answer = await waiting
        assert answer.json() == {
            "nodenames": ["a"],
            "failedNodes": {},
            "failedAndUnresolvableNodes": {},
        }


def _granted() -> set[tuple[str, str, str]]:
    """(group, resource, verb) the scheduler's ClusterRole in k8s/base grants."""
    documents = yaml.safe_load_all((repo_root() / "k8s/base/rbac.yaml").read_text())
    (role,) = [
        d
        for d in documents
        if d and d["kind"] == "ClusterRole" and d["metadata"]["name"] == "flexinfer-scheduler"
    ]
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


async def test_the_cluster_role_grants_exactly_the_calls_made(
    scheduler: Scheduler, kube_apiserver: KubeApiServer
) -> None:
    http, _ = scheduler
    args = {"pod": POD, "nodenames": ["a", "b"]}
    assert (await http.post("/prioritize", json=args)).status_code == 200
    # Each informer lists, then watches: once every one watches, all its calls were made
    # (the nodes' watch can open after the pods' on a busy machine).
    watched = ("nodes", "pods", "configmaps")
    await kube_apiserver.until(lambda s: all(s.open_watches(r) >= 1 for r in watched))
    made = {(c.group, c.rbac_resource, c.verb) for c in kube_apiserver.calls}
    assert made == _granted()
