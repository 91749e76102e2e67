"""The proxy's queues on the apiserver (queue_signals=kubernetes), the real proxy app against
the fake apiserver: a GPUGroup member's queue becomes the GPUGroup's
``flexinfer.ai/queue.<model>`` and ``queue-since`` annotations, written once per change and
not once per request, and removed when the queue drains; a v1alpha2 Model's queue bumps its
``status.lastActiveTime``. The bus's DemandEvents are sent as before."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import yaml

from flexinfer_common.bus import topics
from flexinfer_common.testing.kube_apiserver import KubeApiServer, find_crd_dir
from flexinfer_common.testing.kube_apiserver.fixtures import kube_apiserver_fixture
from flexinfer_proxy.testing import make_model
from flexinfer_proxy.testing_stack import ProxyStack, proxy_stack, upstreams, wait_until

apiserver = kube_apiserver_fixture([find_crd_dir(Path(__file__))])
PAIR = {
    "apiVersion": "ai.flexinfer/v1alpha1",
    "kind": "GPUGroup",
    "metadata": {"name": "pair", "namespace": "default", "annotations": {"keep": "me"}},
    "spec": {"models": [{"name": "a"}, {"name": "b"}]},
}
MODEL_C = {
    "apiVersion": "ai.flexinfer/v1alpha2",
    "kind": "Model",
    "metadata": {"name": "c", "namespace": "default"},
    "spec": {"backend": "reference", "source": "file:///models/c"},
}


def proxy_grants() -> set[tuple[str, str, str]]:
    """What k8s/base/rbac.yaml grants the proxy's ClusterRole."""
    path = find_crd_dir(Path(__file__)).parent / "base" / "rbac.yaml"
    (role,) = [
        doc
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8"))
        if doc and doc["kind"] == "ClusterRole" and doc["metadata"]["name"] == "flexinfer-proxy"
    ]
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def used(api: KubeApiServer) -> set[tuple[str, str, str]]:
    """What the proxy's calls needed."""
    return {(c.group, c.rbac_resource, c.verb) for c in api.calls}


def group_annotations(api: KubeApiServer) -> dict[str, str]:
    """The GPUGroup's annotations."""
    found = api.get("gpugroups", "default", "pair") or {}
    return dict(found.get("metadata", {}).get("annotations") or {})


async def chat(stack: ProxyStack, client: httpx.AsyncClient, model: str) -> int:
    """One chat completion through the proxy; its status code."""
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
    return (await client.post(f"{stack.url}/v1/chat/completions", json=body)).status_code


async def test_a_gpugroup_members_queue_is_written_on_its_gpugroup(
    tmp_path: Path, apiserver: KubeApiServer
) -> None:
    apiserver.create("gpugroups", PAIR)
    settings: dict[str, Any] = {
        "queue_signals": "kubernetes",
        "kubernetes_host": apiserver.url,
        "queue_signal_interval_s": 0.2,
    }
    models = [make_model("a"), make_model("c")]
    async with (
        proxy_stack(tmp_path, models, **settings) as stack,
        upstreams(1) as ups,
        httpx.AsyncClient(timeout=30) as client,
    ):
        demands = stack.bus.consumer(topics.DEMAND, "test", "t")
        requests = [asyncio.create_task(chat(stack, client, "a")) for _ in range(20)]
        await wait_until(lambda: group_annotations(apiserver).get("flexinfer.ai/queue.a") == "20")
        found = group_annotations(apiserver)
        since = datetime.fromisoformat(found["flexinfer.ai/queue-since.a"])
        assert abs((datetime.now(UTC) - since).total_seconds()) < 30
        assert found["keep"] == "me"  # the other annotations are left alone
        assert apiserver.count("patch", "gpugroups") <= 4, "one write per change, not per request"
        assert await demands.fetch(10, timeout_s=5.0), "the bus hears it too"

        await stack.set_endpoints("default/a", [ups[0][1]])
        assert await asyncio.gather(*requests) == [200] * 20
        await wait_until(lambda: "flexinfer.ai/queue.a" not in group_annotations(apiserver))
        assert "flexinfer.ai/queue-since.a" not in group_annotations(apiserver)
        assert apiserver.get("models", "default", "a") is None  # nothing else was written
    assert used(apiserver) == {
        ("ai.flexinfer", "gpugroups", "list"),
        ("ai.flexinfer", "gpugroups", "patch"),
    }
    assert used(apiserver) <= proxy_grants()


async def test_a_v1alpha2_models_queue_bumps_its_last_active_time(
    tmp_path: Path, apiserver: KubeApiServer
) -> None:
    apiserver.create("models", MODEL_C)
    settings: dict[str, Any] = {"queue_signals": "kubernetes", "kubernetes_host": apiserver.url}
    async with (
        proxy_stack(tmp_path, [make_model("c")], **settings) as stack,
        upstreams(1) as ups,
        httpx.AsyncClient(timeout=30) as client,
    ):
        request = asyncio.create_task(chat(stack, client, "c"))

        def bumped() -> bool:
            status = (apiserver.get("models", "default", "c") or {}).get("status") or {}
            return bool(status.get("lastActiveTime"))

        await wait_until(bumped)
        status = (apiserver.get("models", "default", "c") or {})["status"]
        at = datetime.fromisoformat(status["lastActiveTime"])
        assert abs((datetime.now(UTC) - at).total_seconds()) < 30
        assert apiserver.count("patch", "gpugroups") == 0
        await stack.set_endpoints("default/c", [ups[0][1]])
        assert await request == 200
        assert apiserver.count("patch", "models", "status") == 1
    assert used(apiserver) <= proxy_grants()
