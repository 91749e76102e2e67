"""Post-reconcile: the controller deletes its Models' Failed pods, and no other.

A pod in phase Failed (evicted, OOM-killed) is no replica any more: the ReplicaSet (the
test kubelet) makes a replacement and leaves the failed pod, which Kubernetes would keep
until thousands piled up. The controller deletes it, logs it and counts it.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from flexinfer_common.testing.kube_apiserver import KubeApiServer, find_crd_dir
from flexinfer_common.testing.kube_apiserver.fixtures import kube_apiserver_fixture
from flexinfer_controller.runtime.kubernetes.harness import Cluster, model_body, running_cluster
from flexinfer_controller.runtime.kubernetes.pods import view
from flexinfer_controller.testing import eventually

apiserver = kube_apiserver_fixture([find_crd_dir(Path(__file__))])
EVICTED = {
    "phase": "Failed",
    "reason": "Evicted",
    "message": "The node was low on resource: memory.",
    "conditions": [{"type": "Ready", "status": "False"}],
}


@pytest.fixture
async def cluster(apiserver: KubeApiServer) -> AsyncIterator[Cluster]:
    """A running kubelet and controller on the fake apiserver."""
    async with running_cluster(apiserver) as running:
        yield running


def _names(pods: list[dict[str, Any]]) -> list[str]:
    return [p["metadata"]["name"] for p in pods]


def _ready(pod: dict[str, Any]) -> bool:
    found = view(pod)
    return found is not None and found.ready and not found.failed


async def _pruned_metric(url: str) -> float:
    async with httpx.AsyncClient(base_url=url) as client:
        text = (await client.get("/metrics")).text
    for line in text.splitlines():
        if line.startswith("flexinfer_controller_pruned_replicas_total "):
            return float(line.split()[1])
    raise AssertionError("no flexinfer_controller_pruned_replicas_total in /metrics")


async def test_a_failed_pod_is_deleted_and_its_replacement_is_not(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "flexinfer_controller.runtime.kubernetes.runtime")
    api = cluster.api
    api.create("models", model_body(minReplicas=1))
    await cluster.wait_phase("Ready")
    (failed,) = _names(cluster.pods())
    api.set_status("pods", "default", failed, EVICTED)

    await eventually(lambda: api.get("pods", "default", failed) is None, timeout_s=15)
    await eventually(lambda: len(cluster.pods()) == 1 and _ready(cluster.pods()[0]))
    await cluster.wait_phase("Ready")
    (replacement,) = _names(cluster.pods())
    assert replacement != failed
    # Deleted by the controller (over HTTP), once, with its uid as the precondition.
    assert api.count("delete", "pods") == 1
    assert api.count("delete", "pods", name=failed) == 1
    # The line is logged after the DELETE returns: the pod can be gone before it is written.
    await eventually(
        lambda: any(
            "pruned failed pod default/" + failed in r.getMessage() and "Evicted" in r.getMessage()
            for r in caplog.records
        )
    )
    assert await _pruned_metric(cluster.url) == 1.0

    # Later reconciles leave the running replacement alone.
    gets = api.count("get", "deployments")
    api.patch("models", "default", "tiny", {"metadata": {"labels": {"team": "a"}}})
    await eventually(lambda: api.count("get", "deployments") > gets)
    await cluster.wait_phase("Ready")
    assert api.count("delete", "pods") == 1
    assert _names(cluster.pods()) == [replacement]


async def test_an_oom_killed_pod_is_pruned_and_the_model_still_idles_to_zero(
    cluster: Cluster,
) -> None:
    api = cluster.api
    api.create("models", model_body(idleTimeout="1s"))
    await cluster.wait_phase("Idle")
    await cluster.demand()
    await cluster.wait_phase("Ready")
    (pod,) = _names(cluster.pods())
    oom = {
        "phase": "Failed",
        "containerStatuses": [
            {"name": "engine", "ready": False, "restartCount": 0, "image": "engine",
             "imageID": "", "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}},
        ],
    }  # fmt: skip
    api.set_status("pods", "default", pod, oom)
    await eventually(lambda: api.get("pods", "default", pod) is None, timeout_s=15)
    await cluster.wait_phase("Idle", timeout_s=15)
    await eventually(lambda: cluster.pods() == [])
    assert api.count("delete", "pods", name=pod) == 1
