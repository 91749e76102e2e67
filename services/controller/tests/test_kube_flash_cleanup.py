"""The flash loader's cleanup Job on Model deletion, through the whole controller (runtime
kubernetes) on the fake apiserver: a Model whose copy lives in its node's /dev/shm (cache
strategy Memory) gets, when deleted, a Job on that node that removes its copy and keeps
those of the Models still declared."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from flexinfer_common.bus.memory import MemoryBus
from flexinfer_common.testing.kube_apiserver import KubeApiServer, find_crd_dir
from flexinfer_common.testing.kube_apiserver.fixtures import kube_apiserver_fixture
from flexinfer_controller.flashload.__main__ import PROG, cleanup_parser
from flexinfer_controller.flashload.render import MODULE
from flexinfer_controller.runtime.kubernetes.harness import (
    Cluster,
    controller,
    model_body,
    running_cluster,
)
from flexinfer_controller.runtime.kubernetes.kubelet import running_kubelet
from flexinfer_controller.runtime.kubernetes.names import FLASH_NODES_ANNOTATION
from flexinfer_controller.testing import eventually

apiserver = kube_apiserver_fixture([find_crd_dir(Path(__file__))])


def flash_model(name: str, strategy: str = "Memory") -> dict[str, Any]:
    """A warm CPU Model whose weights the flash loader copies to tmpfs."""
    body = model_body(name, minReplicas=1)
    body["spec"]["cache"] = {"strategy": strategy, "flashLoader": {"enabled": True}}
    return body


@pytest.fixture
async def cluster(apiserver: KubeApiServer) -> AsyncIterator[Cluster]:
    """A running kubelet (binding pods to ``gpu-1``) and controller."""
    async with running_cluster(apiserver) as running:
        running.kubelet.node = "gpu-1"
        yield running


def jobs(api: KubeApiServer) -> dict[str, dict[str, Any]]:
    """The Jobs in the namespace, by name."""
    return {j["metadata"]["name"]: j for j in api.objects("jobs", "default")}


def cleanup_jobs(api: KubeApiServer, model: str) -> list[dict[str, Any]]:
    """The flash cleanup Jobs of ``model``."""
    prefix = f"{model}-flash-cleanup-"
    return [job for name, job in jobs(api).items() if name.startswith(prefix)]


async def test_deleting_a_node_tmpfs_model_creates_its_cleanup_job(cluster: Cluster) -> None:
    api = cluster.api
    api.create("models", flash_model("tiny"))
    api.create("models", flash_model("other"))
    await cluster.wait_phase("Ready")
    await cluster.wait_phase("Ready", "other")
    assert [p["spec"]["nodeName"] for p in cluster.pods()] == ["gpu-1", "gpu-1"]
    assert cleanup_jobs(api, "tiny") == []

    api.delete("models", "default", "tiny")
    await eventually(lambda: cluster.model() is None, timeout_s=15)
    (job,) = cleanup_jobs(api, "tiny")
    assert "ownerReferences" not in job["metadata"]  # it outlives the deleted Model
    spec = job["spec"]["template"]["spec"]
    assert spec["nodeName"] == "gpu-1"  # where the copy is
    assert spec["volumes"] == [
        {"name": "flash-tmpfs", "hostPath": {"path": "/dev/shm", "type": "Directory"}}
    ]
    (container,) = spec["containers"]
    assert container["volumeMounts"] == [{"name": "flash-tmpfs", "mountPath": "/dev/shm"}]
    assert container["command"][:4] == [*MODULE, "cleanup"]
    args = cleanup_parser(PROG).parse_args(container["command"][4:])
    # Only the deleted Model's copy goes: the Model still declared on the node keeps its own.
    assert (str(args.dest), args.keep) == ("/dev/shm", ["default/other"])
    assert (cluster.model("other") or {})["status"]["phase"] == "Ready"


async def test_an_empty_dir_copy_needs_no_cleanup_job(cluster: Cluster) -> None:
    api = cluster.api
    api.create("models", flash_model("tiny", strategy="Local"))  # a pod's emptyDir
    await cluster.wait_phase("Ready")
    api.delete("models", "default", "tiny")
    await eventually(lambda: cluster.model() is None, timeout_s=15)
    assert api.count("create", "jobs") == 0


async def test_a_model_that_ran_on_two_nodes_gets_a_cleanup_job_on_each(cluster: Cluster) -> None:
    api = cluster.api
    api.create("models", flash_model("tiny"))
    await cluster.wait_phase("Ready")
    cluster.kubelet.node = "gpu-2"  # the scheduler puts the second replica elsewhere
    api.patch(
        "models", "default", "tiny", {"spec": {"serverless": {"minReplicas": 2, "maxReplicas": 2}}}
    )
    await eventually(lambda: len(cluster.pods()) == 2, timeout_s=15)
    assert sorted(p["spec"]["nodeName"] for p in cluster.pods()) == ["gpu-1", "gpu-2"]

    api.delete("models", "default", "tiny")
    await eventually(lambda: cluster.model() is None, timeout_s=15)
    nodes = [j["spec"]["template"]["spec"]["nodeName"] for j in cleanup_jobs(api, "tiny")]
    assert sorted(nodes) == ["gpu-1", "gpu-2"]  # each node's stale copy goes


def cleanup_nodes(api: KubeApiServer, model: str) -> list[str]:
    """The nodes of the flash cleanup Jobs of ``model``, sorted."""
    return sorted(j["spec"]["template"]["spec"]["nodeName"] for j in cleanup_jobs(api, model))


def flash_nodes(api: KubeApiServer, name: str = "tiny") -> str | None:
    """What the ``flexinfer.ai/flash-nodes`` annotation of ``default/<name>`` says."""
    notes = (api.get("models", "default", name) or {}).get("metadata", {}).get("annotations")
    return (notes or {}).get(FLASH_NODES_ANNOTATION)


async def test_a_restarted_controller_cleans_every_node_the_model_ran_on(
    apiserver: KubeApiServer,
) -> None:
    bus = MemoryBus()
    try:
        async with running_kubelet(apiserver) as kubelet:
            kubelet.node = "gpu-1"
            cluster = Cluster(apiserver, kubelet, bus)
            async with controller(apiserver, bus):
                apiserver.create("models", flash_model("tiny"))
                await cluster.wait_phase("Ready")
                await eventually(lambda: flash_nodes(apiserver) == "gpu-1", timeout_s=15)

            # The controller is down: the pod on gpu-1 is evicted, its replacement lands on
            # gpu-2. No pod is left on gpu-1 for the next controller to see.
            kubelet.node = "gpu-2"
            (pod,) = cluster.pods()
            apiserver.delete("pods", "default", pod["metadata"]["name"])
            await eventually(lambda: [p["spec"]["nodeName"] for p in cluster.pods()] == ["gpu-2"])

            async with controller(apiserver, bus):  # a new Controller: nothing in its memory
                apiserver.delete("models", "default", "tiny")
                await eventually(lambda: cluster.model() is None, timeout_s=15)
    finally:
        await bus.close()
    assert cleanup_nodes(apiserver, "tiny") == ["gpu-1", "gpu-2"]


async def test_only_node_tmpfs_pods_record_their_node(cluster: Cluster) -> None:
    api = cluster.api
    api.create("models", flash_model("tiny", strategy="Local"))  # a pod's emptyDir
    api.create("models", flash_model("other"))
    await cluster.wait_phase("Ready")
    await eventually(lambda: flash_nodes(api, "other") == "gpu-1", timeout_s=15)
    assert flash_nodes(api) is None  # its copy went with its pod: no write
