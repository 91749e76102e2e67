"""LoRAAdapters on the kubernetes runtime, against the shared fake apiserver: adapters applied
as kubectl would are loaded into the engines of the base Model's pods.

The test kubelet hands out loopback podIPs, and ``running_pod_engines`` runs each Ready
pod's container (the vLLM stand-in with the pod's rendered args and env) at its podIP, so
the controller finds its engines as on a cluster: through the pods' status. The pods'
``/models`` volume is a local directory (``Cluster.volume``); the test plays the Job
controller, writing what a fetch Job would and setting the Jobs' status.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from flexinfer_common.bus.memory import MemoryBus
from flexinfer_common.testing.kube_apiserver import KubeApiServer, find_crd_dir
from flexinfer_common.testing.kube_apiserver.fixtures import kube_apiserver_fixture
from flexinfer_controller.kube_settings import KubernetesSettings
from flexinfer_controller.runtime.kubernetes.harness import controller, model_body
from flexinfer_controller.runtime.kubernetes.kubelet import (
    JOB_COMPLETE,
    JOB_FAILED,
    running_kubelet,
)
from flexinfer_controller.runtime.kubernetes.names import COMPONENT_LABEL
from flexinfer_controller.testing import eventually, fake_model_dir
from flexinfer_testing.backend_servers import install_standins
from flexinfer_testing.backend_servers.pods import (
    PodEngines,
    loopback_network,
    running_pod_engines,
)

apiserver = kube_apiserver_fixture([find_crd_dir(Path(__file__))])
FINALIZER = "flexinfer.ai/lora-cleanup"


@dataclass
class Cluster:
    """The fake apiserver, the engines of its pods, and a directory for adapters."""

    api: KubeApiServer
    engines: PodEngines
    adapters: Path
    volume: Path
    """The base Model's cache volume, as the pods mount it at /models."""

    def adapter(self, name: str) -> dict[str, Any] | None:
        """The stored LoRAAdapter, as kubectl would get it."""
        return self.api.get("loraadapters", "default", name)

    def pod(self) -> dict[str, Any]:
        """The one engine pod that serves."""
        (pod,) = [
            p
            for p in self.api.objects("pods", "default")
            if p["metadata"]["name"] in self.engines.processes
        ]
        return pod

    async def reaches(self, name: str, phase: str, timeout_s: float = 20) -> dict[str, Any]:
        """The adapter once a pass of its current generation wrote ``phase``."""

        def written() -> bool:
            found = self.adapter(name) or {}
            status = found.get("status") or {}
            generation = found.get("metadata", {}).get("generation")
            current = any(
                c["type"] == "Loaded" and c.get("observedGeneration") == generation
                for c in status.get("conditions") or []
            )
            return current and status.get("phase") == phase

        try:
            await eventually(written, timeout_s)
        except AssertionError:
            raise AssertionError(f"{name} never {phase}: {self.adapter(name)}") from None
        found = self.adapter(name)
        assert found is not None
        return found


@pytest.fixture
async def cluster(apiserver: KubeApiServer, tmp_path: Path) -> AsyncIterator[Cluster]:
    """Kubelet, pod engines and the controller (runtime=kubernetes) on the apiserver."""
    standins = install_standins(tmp_path / "standins")
    labels = {"flexinfer.ai/gpu.vendor": "NVIDIA", "flexinfer.ai/gpu.arch": "sm_89"}
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-1", "labels": labels}}
    apiserver.create("nodes", node)  # where the kubelet binds pods: vLLM needs its GPU
    bus = MemoryBus()
    volume = tmp_path / "volume"
    kube = KubernetesSettings(host=apiserver.url, namespaces=["default"], job_poll_s=0.05)
    try:
        async with running_kubelet(apiserver) as kubelet:
            kubelet.pod_network = loopback_network()
            model_dir = fake_model_dir(tmp_path / "m")
            async with (
                running_pod_engines(
                    apiserver, standins, model_dir, {"/models": volume}
                ) as engines,
                controller(
                    apiserver, bus, lora_resync_interval_s=0.5,
                    lora_roots=[tmp_path / "adapters"], kubernetes=kube,
                ),
            ):  # fmt: skip
                yield Cluster(apiserver, engines, tmp_path / "adapters", volume)
    finally:
        await bus.close()


def vllm_model() -> dict[str, Any]:
    """Model ``base``: vLLM with LoRA on, one warm replica."""
    body = model_body("base", minReplicas=1)
    body["spec"].update(backend="vllm", gpu={"vendor": "nvidia"}, config={"enableLora": True})
    return body


def lora_body(name: str, source: dict[str, str]) -> dict[str, Any]:
    """A preloaded LoRAAdapter ``name`` (adapterName ``<name>-lora``) on ``base``."""
    spec = {"modelRef": "base", "adapterName": f"{name}-lora", "source": source, "preload": True}
    return {
        "apiVersion": "ai.flexinfer/v1alpha2",
        "kind": "LoRAAdapter",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    }


def adapter_dir(root: Path, name: str) -> Path:
    path = root / name
    path.mkdir(parents=True)
    (path / "adapter_config.json").write_text(json.dumps({"r": 8}))
    return path


def engine_url(pod: dict[str, Any]) -> str:
    return f"http://{pod['status']['podIP']}:8000"


async def held(url: str) -> dict[str, str]:
    """What the engine at ``url`` holds (adapter cards of /v1/models); {} when it is down."""
    try:
        async with httpx.AsyncClient(base_url=url, timeout=2, trust_env=False) as client:
            cards = (await client.get("/v1/models")).json()["data"]
    except httpx.HTTPError:
        return {}
    return {c["id"]: c["root"] for c in cards if c["parent"]}


async def test_adapters_follow_the_pods_and_leave_on_delete(cluster: Cluster) -> None:
    api = cluster.api
    api.create("models", vllm_model())
    path = adapter_dir(cluster.adapters, "sql")
    api.create("loraadapters", lora_body("sql", {"type": "LocalPath", "uri": str(path)}))
    loaded = await cluster.reaches("sql", "Loaded", timeout_s=30)
    assert (loaded["status"]["loadedReplicas"], loaded["status"]["totalReplicas"]) == (1, 1)
    assert loaded["metadata"]["finalizers"] == [FINALIZER]
    first = cluster.pod()
    assert await held(engine_url(first)) == {"sql-lora": str(path)}

    # The container restarts in place (same podIP, an empty engine): a resync refills it.
    cluster.engines.stop(first["metadata"]["name"])
    cluster.engines.start(first)
    await eventually(lambda: _holds(engine_url(first)), timeout_s=15)

    # The pod is replaced (a new podIP): the adapter follows it there.
    api.delete("pods", "default", first["metadata"]["name"])

    async def moved() -> bool:
        pods = [
            p
            for p in api.objects("pods", "default")
            if p["metadata"]["name"] != first["metadata"]["name"]
        ]
        return len(pods) == 1 and await _holds(engine_url(pods[0]))

    await eventually(moved, timeout_s=30)
    await cluster.reaches("sql", "Loaded")

    # kubectl delete: the finalizer holds it until the engine let it go.
    second = cluster.pod()
    api.delete("loraadapters", "default", "sql")
    await eventually(lambda: cluster.adapter("sql") is None, timeout_s=15)
    assert await held(engine_url(second)) == {}


async def _holds(url: str) -> bool:
    return "sql-lora" in await held(url)


async def job_of(api: KubeApiServer, component: str) -> dict[str, Any]:
    """The one Job of ``component`` (prefetch, lora-fetch, lora-cleanup), once it exists."""
    found: list[dict[str, Any]] = []

    def exists() -> bool:
        found[:] = [
            j
            for j in api.objects("jobs", "default")
            if j["metadata"]["labels"].get(COMPONENT_LABEL) == component
        ]
        return len(found) == 1

    await eventually(exists, timeout_s=15)
    return found[0]


async def cached_vllm_model(api: KubeApiServer) -> None:
    """Model ``base`` from the Hub (a cache PVC), its prefetch Job done."""
    body = vllm_model()
    body["spec"]["source"] = "hf://org/base"
    api.create("models", body)
    prefetch = await job_of(api, "prefetch")
    api.set_status("jobs", "default", prefetch["metadata"]["name"], JOB_COMPLETE)


async def test_a_hub_adapter_is_fetched_into_the_models_volume_by_a_job(
    cluster: Cluster,
) -> None:
    api = cluster.api
    await cached_vllm_model(api)
    api.create("loraadapters", lora_body("hf", {"type": "HuggingFace", "uri": "org/sql-lora"}))
    caching = await cluster.reaches("hf", "Caching")
    assert caching["metadata"]["finalizers"] == [FINALIZER]
    fetch = await job_of(api, "lora-fetch")
    assert fetch["metadata"]["labels"]["flexinfer.ai/lora-adapter"] == "hf"
    pod = fetch["spec"]["template"]["spec"]
    args = pod["containers"][0]["args"]
    assert args[args.index("download") + 1 :] == [
        "org/sql-lora", "--provider", "hf", "--strategy", "SmartFallback",
        "--cache-dir", "/models/lora-adapters/default_hf",
    ]  # fmt: skip
    assert pod["volumes"][0]["persistentVolumeClaim"] == {"claimName": "base-cache"}

    # The Job's container writes the adapter where the engines mount the volume, then the
    # Job succeeds: the adapter is loaded from that path.
    files = cluster.volume / "lora-adapters" / "default_hf" / "huggingface" / "org" / "sql-lora"
    adapter_dir(files.parent, files.name)
    api.set_status("jobs", "default", fetch["metadata"]["name"], JOB_COMPLETE)
    loaded = await cluster.reaches("hf", "Loaded", timeout_s=30)
    cached = {c["type"]: c for c in loaded["status"]["conditions"]}["Cached"]
    assert (cached["status"], cached["reason"]) == ("True", "Cached")
    path = "/models/lora-adapters/default_hf/huggingface/org/sql-lora"
    assert await held(engine_url(cluster.pod())) == {"hf-lora": path}

    # Deleted: unloaded, the fetch Job deleted, and a Job removes the files.
    api.delete("loraadapters", "default", "hf")
    await eventually(lambda: cluster.adapter("hf") is None, timeout_s=15)
    assert await held(engine_url(cluster.pod())) == {}
    assert api.get("jobs", "default", fetch["metadata"]["name"]) is None
    cleanup = await job_of(api, "lora-cleanup")
    container = cleanup["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["rm", "-rf", "--", "/models/lora-adapters/default_hf"]
    assert cleanup["spec"]["ttlSecondsAfterFinished"] == 300


async def test_a_failed_fetch_job_fails_the_adapter(cluster: Cluster) -> None:
    api = cluster.api
    await cached_vllm_model(api)
    api.create("loraadapters", lora_body("oci", {"type": "OCI", "uri": "reg.lan/loras/sql:v1"}))
    fetch = await job_of(api, "lora-fetch")
    args = fetch["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "oci://reg.lan/loras/sql:v1" in args
    api.set_status("jobs", "default", fetch["metadata"]["name"], JOB_FAILED)
    failed = await cluster.reaches("oci", "Failed")
    cached = {c["type"]: c for c in failed["status"]["conditions"]}["Cached"]
    assert (cached["status"], cached["reason"]) == ("False", "FetchFailed")
    assert "BackoffLimitExceeded" in failed["status"]["message"]


async def test_a_model_without_a_cache_volume_takes_no_fetched_adapter(cluster: Cluster) -> None:
    cluster.api.create("models", vllm_model())  # a node directory (file://): not a cache
    source = {"type": "HuggingFace", "uri": "org/sql-lora"}
    cluster.api.create("loraadapters", lora_body("hf", source))
    failed = await cluster.reaches("hf", "Failed")
    condition = next(c for c in failed["status"]["conditions"] if c["type"] == "Cached")
    assert (condition["status"], condition["reason"]) == ("False", "NoCacheVolume")
    assert "LocalPath" in failed["status"]["message"]
    assert cluster.api.objects("jobs", "default") == []
