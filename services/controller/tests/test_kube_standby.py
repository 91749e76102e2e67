"""ensureService and ensureDeployment on every reconcile, also for a Model that runs nothing.

An idle Model has its Service and a Deployment at 0 replicas as soon as it is applied; a
resync writes nothing, a spec change one update; a Model detectGPU cannot place gets its
Service but no Deployment; a restarted controller converges with no duplicates.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

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
from flexinfer_controller.runtime.kubernetes.kubelet import running_kubelet
from flexinfer_controller.testing import eventually

apiserver = kube_apiserver_fixture([find_crd_dir(Path(__file__))])


@pytest.fixture
async def cluster(apiserver: KubeApiServer) -> AsyncIterator[Cluster]:
    """A running kubelet and controller on the fake apiserver."""
    async with running_cluster(apiserver) as running:
        yield running


def _deployment(api: KubeApiServer, name: str = "tiny") -> dict[str, Any]:
    found = api.get("deployments", "default", name)
    assert found is not None, f"no Deployment {name}"
    return found


async def _resynced(cluster: Cluster) -> None:
    """A reconcile with nothing to do: a label on the Model, read and reconciled."""
    api = cluster.api
    gets = api.count("get", "deployments")
    api.patch("models", "default", "tiny", {"metadata": {"labels": {"team": "a"}}})
    await eventually(lambda: api.count("get", "deployments") > gets)
    await cluster.wait_phase("Idle")


async def test_an_idle_model_gets_its_service_and_a_deployment_at_zero(cluster: Cluster) -> None:
    api = cluster.api
    api.create("models", model_body(minReplicas=0))
    await cluster.wait_phase("Idle")
    service = api.get("services", "default", "tiny")
    assert service is not None
    assert service["spec"]["type"] == "ClusterIP"
    assert service["spec"]["ports"][0]["port"] == 8000
    assert service["metadata"]["labels"]["flexinfer.ai/model"] == "tiny"
    deployment = _deployment(api)
    assert deployment["spec"]["replicas"] == 0
    assert deployment["spec"]["selector"]["matchLabels"] == service["spec"]["selector"]
    assert cluster.pods() == []
    assert cluster.status()["desiredReplicas"] == 0

    await _resynced(cluster)
    assert writes(api, "deployments") == 0
    assert writes(api, "services") == 0
    assert api.count("create", "deployments") == 1
    assert api.count("create", "services") == 1


async def test_a_spec_change_of_an_idle_model_is_one_update(cluster: Cluster) -> None:
    api = cluster.api
    api.create("models", model_body())
    await cluster.wait_phase("Idle")
    assert writes(api, "deployments") == 0
    api.patch("models", "default", "tiny", {"spec": {"nodeSelector": {"disk": "ssd"}}})
    await cluster.wait_phase("Idle")
    assert writes(api, "deployments") == 1
    deployment = _deployment(api)
    assert deployment["spec"]["template"]["spec"]["nodeSelector"] == {"disk": "ssd"}
    assert deployment["spec"]["replicas"] == 0
    assert cluster.pods() == []

    await _resynced(cluster)
    assert writes(api, "deployments") == 1
    assert writes(api, "services") == 0


async def test_the_proxy_demand_scales_the_idle_deployment(cluster: Cluster) -> None:
    api = cluster.api
    api.create("models", model_body(idleTimeout="1s"))
    await cluster.wait_phase("Idle")
    await cluster.demand()
    await cluster.wait_phase("Ready")
    assert _deployment(api)["spec"]["replicas"] == 1
    await cluster.wait_phase("Idle")
    await eventually(lambda: cluster.pods() == [])
    assert _deployment(api)["spec"]["replicas"] == 0
    # One write up (the start), one down (the stop's scale): ensure never touched replicas.
    assert writes(api, "deployments") == 2
    assert api.count("create", "deployments") == 1


async def test_an_unplaced_model_gets_its_service_and_no_deployment(cluster: Cluster) -> None:
    api = cluster.api
    body = model_body(minReplicas=1)
    body["spec"]["gpu"] = {"vendor": "nvidia", "count": 1}
    api.create("models", body)
    await cluster.wait_phase("Pending")
    schedulable = {c["type"]: c for c in cluster.status()["conditions"]}["Schedulable"]
    assert schedulable["status"] == "False"
    await eventually(lambda: api.get("services", "default", "tiny") is not None)
    assert api.get("deployments", "default", "tiny") is None
    assert cluster.pods() == []


async def test_a_restart_after_a_crash_between_service_and_deployment_converges(
    apiserver: KubeApiServer,
) -> None:
    bus = MemoryBus()
    async with running_kubelet(apiserver) as kubelet:
        cluster = Cluster(apiserver, kubelet, bus)
        async with controller(apiserver, bus):
            apiserver.create("models", model_body())
            await cluster.wait_phase("Idle")
        # What a controller that died after ensureService and before ensureDeployment left.
        apiserver.delete("deployments", "default", "tiny")
        async with controller(apiserver, bus):
            await eventually(lambda: apiserver.get("deployments", "default", "tiny") is not None)
        assert apiserver.count("create", "deployments") == 2
        assert apiserver.count("create", "services") == 1
        before = [c for c in apiserver.calls if c.verb in ("create", "update", "patch")]
        async with controller(apiserver, bus):
            await eventually(lambda: apiserver.count("list", "pods") >= 3)
            await _resynced(cluster)
        after = [c for c in apiserver.calls if c.verb in ("create", "update", "patch")]
        # The third controller found everything in place: it wrote nothing.
        assert after == before
        assert len(apiserver.objects("deployments")) == len(apiserver.objects("services")) == 1
    await bus.close()


async def test_a_failed_write_is_retried_into_one_deployment(cluster: Cluster) -> None:
    api = cluster.api
    api.inject(500, verb="create", resource="deployments")
    api.create("models", model_body())
    await eventually(lambda: api.get("deployments", "default", "tiny") is not None)
    await cluster.wait_phase("Idle")
    assert api.count("create", "deployments") == 2, "the injected failure, then the retry"
    assert len(api.objects("deployments")) == 1
