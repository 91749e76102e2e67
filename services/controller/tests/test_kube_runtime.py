"""The controller with runtime=kubernetes end to end, on the shared fake apiserver.

Models are applied to the apiserver as kubectl would; a test-side kubelet plays the
Deployment controller and marks pods Ready on their podIP. Every wait is on a condition.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from flexinfer_common.bus.memory import MemoryBus
from flexinfer_common.testing.kube_apiserver import KubeApiServer, find_crd_dir
from flexinfer_common.testing.kube_apiserver.fixtures import kube_apiserver_fixture
from flexinfer_controller.runtime.kubernetes.harness import (
    Cluster,
    controller,
    model_body,
    running_cluster,
    writes,
)
from flexinfer_controller.runtime.kubernetes.kubelet import crash_status, running_kubelet
from flexinfer_controller.testing import eventually

apiserver = kube_apiserver_fixture([find_crd_dir(Path(__file__))])
FINALIZER = "flexinfer.ai/model-cleanup"


@pytest.fixture
async def cluster(apiserver: KubeApiServer) -> AsyncIterator[Cluster]:
    """A running kubelet and controller on the fake apiserver."""
    async with running_cluster(apiserver) as running:
        yield running


async def test_demand_scales_a_model_from_zero_and_idle_back(cluster: Cluster) -> None:
    api = cluster.api
    api.create("models", model_body(idleTimeout="2s"))
    await cluster.wait_phase("Idle")
    assert FINALIZER in cluster.model()["metadata"]["finalizers"]  # type: ignore[index]
    # Idle from the start: its Deployment is there, at 0 replicas, and no pod runs.
    assert api.get("deployments", "default", "tiny")["spec"]["replicas"] == 0  # type: ignore[index]
    assert cluster.pods() == []

    await cluster.demand()
    await cluster.wait_phase("Ready")
    calls = [(c.verb, c.resource) for c in api.calls]
    assert calls.index(("patch", "models")) < calls.index(("create", "deployments"))
    assert api.count("create", "deployments") == 1, "the start scaled the idle Deployment"
    deployment = api.get("deployments", "default", "tiny")
    assert deployment is not None
    assert deployment["spec"]["replicas"] == 1
    service = api.get("services", "default", "tiny")
    assert service is not None
    assert service["spec"]["ports"][0]["port"] == 8000
    (pod,) = cluster.pods()
    status = cluster.status()
    assert status["endpoint"] == f"http://{pod['status']['podIP']}:8000"
    assert status["readyReplicas"] == 1
    endpoints = api.get("configmaps", "default", "flexinfer-endpoints-tiny")
    assert endpoints is not None
    assert status["endpoint"] in str(endpoints["data"])

    # No more demand: the idle timeout scales the Deployment to zero, and the pod goes.
    await cluster.wait_phase("Idle", timeout_s=15)
    await eventually(lambda: cluster.pods() == [])
    assert api.get("deployments", "default", "tiny")["spec"]["replicas"] == 0  # type: ignore[index]


async def test_a_spec_change_updates_the_deployment_once(cluster: Cluster) -> None:
    api = cluster.api
    api.create("models", model_body(minReplicas=1))
    await cluster.wait_phase("Ready")
    before = writes(api, "deployments")
    api.patch("models", "default", "tiny", {"spec": {"nodeSelector": {"disk": "ssd"}}})
    await eventually(lambda: writes(api, "deployments") > before)
    await cluster.wait_phase("Ready")
    await eventually(lambda: len(cluster.pods()) == 1)
    updated = writes(api, "deployments")
    assert updated == before + 1
    template = api.get("deployments", "default", "tiny")["spec"]["template"]  # type: ignore[index]
    assert template["spec"]["nodeSelector"] == {"disk": "ssd"}
    (pod,) = cluster.pods()
    assert pod["spec"]["nodeSelector"] == {"disk": "ssd"}, "the old pod was replaced"

    # Later reconciles (a resync, a status echo) find nothing to write.
    api.patch("models", "default", "tiny", {"metadata": {"labels": {"team": "a"}}})
    await eventually(lambda: api.count("get", "models", name="tiny") > 0)
    await cluster.wait_phase("Ready")
    assert writes(api, "deployments") == updated
    assert writes(api, "services") == 0


async def test_deleting_a_model_removes_its_objects_then_the_finalizer(cluster: Cluster) -> None:
    api = cluster.api
    api.create("models", model_body(minReplicas=1))
    await cluster.wait_phase("Ready")
    api.delete("models", "default", "tiny")
    await eventually(lambda: cluster.model() is None, timeout_s=15)
    assert api.get("deployments", "default", "tiny") is None
    assert api.get("services", "default", "tiny") is None
    await eventually(lambda: cluster.pods() == [])
    calls = [(c.verb, c.resource) for c in api.calls]
    last_finalizer_write = max(i for i, c in enumerate(calls) if c == ("patch", "models"))
    assert calls.index(("delete", "deployments")) < last_finalizer_write
    assert calls.index(("delete", "services")) < last_finalizer_write


async def test_a_restarted_controller_adopts_running_pods(apiserver: KubeApiServer) -> None:
    bus = MemoryBus()
    async with running_kubelet(apiserver) as kubelet:
        cluster = Cluster(apiserver, kubelet, bus)
        async with controller(apiserver, bus):
            apiserver.create("models", model_body(minReplicas=1))
            await cluster.wait_phase("Ready")
            (pod,) = cluster.pods()
        written = writes(apiserver, "deployments")
        creates = apiserver.count("create", "deployments")
        async with controller(apiserver, bus):
            await eventually(lambda: apiserver.count("list", "pods") >= 2)
            apiserver.patch("models", "default", "tiny", {"metadata": {"labels": {"x": "1"}}})
            await cluster.wait_phase("Ready")
            assert [p["metadata"]["name"] for p in cluster.pods()] == [pod["metadata"]["name"]]
            assert writes(apiserver, "deployments") == written
            assert apiserver.count("create", "deployments") == creates
    await bus.close()


async def test_a_crash_looping_pod_fails_the_model(cluster: Cluster) -> None:
    api = cluster.api
    cluster.kubelet.crashing.add("default/tiny")
    api.create("models", model_body(minReplicas=1))
    await eventually(lambda: len(cluster.pods()) == 1)
    (pod,) = cluster.pods()
    container = pod["spec"]["containers"][0]["name"]
    api.set_status("pods", "default", pod["metadata"]["name"], crash_status(container, restarts=3))
    await cluster.wait_phase("Failed")
    loaded = {c["type"]: c for c in cluster.status()["conditions"]}["Loaded"]
    assert loaded["reason"] == "CrashLoopBackOff"
    assert "exit code 1" in loaded["message"]
