"""Legacy ModelCaches on Kubernetes, against the shared fake apiserver: caches are applied as
kubectl would; the loop learns of them from its informers; Jobs are driven to Complete or
Failed with ``set_status``, as the Job controller would. Every wait is on a condition."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from flexinfer_common.kube.client import KubeClient
from flexinfer_common.testing.kube_apiserver import KubeApiServer, find_crd_dir
from flexinfer_common.testing.kube_apiserver.fixtures import kube_apiserver_fixture
from flexinfer_controller.adapters.kube.modelcaches import modelcache_controller, parse_cache
from flexinfer_controller.kube_settings import KubernetesSettings
from flexinfer_controller.legacy.modelcache.controller import ModelCacheController
from flexinfer_controller.legacy.modelcache.testing import cache_manifest
from flexinfer_controller.runtime.kubernetes import rbac
from flexinfer_controller.runtime.kubernetes.kubelet import (
    JOB_COMPLETE,
    JOB_FAILED,
    finished_job_pod,
)

apiserver = kube_apiserver_fixture([find_crd_dir(Path(__file__))])


@dataclass
class Cluster:
    """The fake apiserver and the running ModelCache loop (restartable)."""

    api: KubeApiServer
    client: KubeClient
    settings: KubernetesSettings
    loop: ModelCacheController

    def jobs(self) -> list[dict[str, Any]]:
        """The Jobs in namespace ml."""
        return self.api.objects("jobs", "ml")

    def status(self, name: str = "c") -> dict[str, Any]:
        """The cache's status (empty before the first write)."""
        found = self.api.get("modelcaches", "ml", name) or {}
        return dict(found.get("status") or {})

    async def phase(self, phase: str, name: str = "c", **fields: Any) -> dict[str, Any]:
        """Until the cache's status has ``phase`` (and ``fields``); that status."""

        def reached(api: KubeApiServer) -> bool:
            status = self.status(name)
            return status.get("phase") == phase and all(
                status.get(k) == v for k, v in fields.items()
            )

        await self.api.until(reached, within_s=20)
        return self.status(name)

    async def job_count(self, count: int) -> list[dict[str, Any]]:
        """Until there are ``count`` Jobs; them."""
        await self.api.until(lambda api: len(self.jobs()) == count, within_s=20)
        return self.jobs()

    def complete(self, job: dict[str, Any], status: dict[str, Any] = JOB_COMPLETE) -> None:
        """Write the Job's status as the Job controller would."""
        self.api.set_status("jobs", "ml", job["metadata"]["name"], status)

    async def restart(self) -> None:
        """Stop the loop and start a new one (a controller restart)."""
        await self.loop.stop()
        self.loop = modelcache_controller(self.client, self.settings, resync_s=3600)
        await self.loop.start()


@pytest.fixture
async def cluster(apiserver: KubeApiServer) -> AsyncIterator[Cluster]:
    """The loop on the fake apiserver, reading running Jobs again every 0.1 s."""
    settings = KubernetesSettings(host=apiserver.url, namespaces=["ml"], job_poll_s=0.1)
    client = KubeClient(apiserver.url)
    loop = modelcache_controller(client, settings, resync_s=3600)
    await loop.start()
    running = Cluster(apiserver, client, settings, loop)
    try:
        yield running
    finally:
        await running.loop.stop()
        await client.close()


def apply(api: KubeApiServer, name: str = "c", **spec: Any) -> None:
    """Create the ModelCache as kubectl apply would."""
    api.create("modelcaches", cache_manifest(name, **{"source": "HF://org/m", **spec}))


def node(api: KubeApiServer, name: str, **node_labels: str) -> None:
    """A node with ``node_labels``."""
    api.create("nodes", {"apiVersion": "v1", "kind": "Node",
                         "metadata": {"name": name, "labels": node_labels}})  # fmt: skip


def _ready(status: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in status["conditions"] if c["type"] == "Ready")


async def test_shared_pvc_gets_a_claim_and_a_job_then_ready_with_its_path(cluster: Cluster) -> None:
    api = cluster.api
    apply(api, storageStrategy="SharedPVC", storageSize="10Gi", clusterStorageClassName="fast",
          secretRef="hf-token")  # fmt: skip
    (job,) = await cluster.job_count(1)
    status = await cluster.phase("Provisioning")
    assert _ready(status)["reason"] == "PrefetchRunning"
    claim = api.get("persistentvolumeclaims", "ml", "c-cache")
    assert claim is not None
    assert claim["spec"]["storageClassName"] == "fast"
    assert claim["spec"]["resources"]["requests"]["storage"] == "10Gi"
    cache = api.get("modelcaches", "ml", "c")
    assert cache is not None
    for obj in (job, claim):
        (owner,) = obj["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["uid"]) == ("ModelCache", cache["metadata"]["uid"])
        assert obj["metadata"]["labels"]["flexinfer.ai/modelcache"] == "c"
    env = job["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {
        "name": "HF_TOKEN",
        "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "HF_TOKEN"}},
    } in env

    cluster.complete(job)
    status = await cluster.phase("Ready")
    assert status["path"] == "pvc://c-cache/c/huggingface/org/m"
    assert (_ready(status)["status"], _ready(status)["reason"]) == ("True", "Cached")
    assert _ready(status)["observedGeneration"] == 1
    # Status goes through the subresource only; the cache's spec is never written.
    assert api.count(verb="patch", resource="modelcaches", subresource=None) == 0
    assert api.count(verb="create", resource="jobs") == 1


async def test_ready_reports_the_bytes_the_job_fetched(cluster: Cluster) -> None:
    api = cluster.api
    apply(api)
    (job,) = await cluster.job_count(1)
    # A pod of a same-named Job of before (another uid) says something else: not read.
    finished_job_pod(api, job, '{"sizeBytes": 1}', uid="0d9e2c1a-0000-4000-8000-000000000000")
    finished_job_pod(api, job, '{"sizeBytes": 16106127360}')
    cluster.complete(job)
    status = await cluster.phase("Ready", sizeBytes="16106127360")
    assert status["path"] == "pvc://c-cache/c/huggingface/org/m"

    # Known for this path: a later pass, a restarted loop's first one too, reads no pod.
    pods, passes = api.count("list", "pods"), api.count("list", "jobs")
    await cluster.restart()
    await api.until(lambda a: a.count(verb="list", resource="jobs") > passes)
    api.patch("modelcaches", "ml", "c", {"metadata": {"labels": {"team": "a"}}})
    # Passes of a key never overlap: this one starts once the restarted loop's first ended.
    await api.until(lambda a: a.count(verb="list", resource="jobs") > passes + 1)
    assert api.count("list", "pods") == pods
    assert cluster.status()["sizeBytes"] == "16106127360"

    # A new spec: its size is unknown until its own Job reports.
    api.patch("modelcaches", "ml", "c", {"spec": {"source": "hf://org/other"}})
    status = await cluster.phase("Provisioning")
    assert "sizeBytes" not in status


async def test_a_job_pod_that_reported_nothing_leaves_the_size_unset(cluster: Cluster) -> None:
    apply(cluster.api)
    (job,) = await cluster.job_count(1)
    finished_job_pod(cluster.api, job, "")  # an older registry client, say
    cluster.complete(job)
    status = await cluster.phase("Ready")
    assert "sizeBytes" not in status


def _claim_request(api: KubeApiServer) -> str:
    claim = api.get("persistentvolumeclaims", "ml", "c-cache") or {}
    return str(claim["spec"]["resources"]["requests"]["storage"])


def _resized(status: dict[str, Any]) -> dict[str, Any]:
    """The StorageResized condition ({} before there is one)."""
    found = [c for c in status.get("conditions") or [] if c["type"] == "StorageResized"]
    return dict(found[0]) if found else {}


async def test_a_grown_storage_size_expands_the_claim_and_a_shrink_is_refused(
    cluster: Cluster,
) -> None:
    api = cluster.api
    apply(api, storageSize="10Gi")
    (job,) = await cluster.job_count(1)
    cluster.complete(job)
    status = await cluster.phase("Ready")
    assert _resized(status) == {}

    api.patch("modelcaches", "ml", "c", {"spec": {"storageSize": "20Gi"}})
    await api.until(lambda a: _claim_request(a) == "20Gi", within_s=20)
    await cluster.phase("Ready")
    await api.until(lambda a: _resized(cluster.status()).get("reason") == "Expanded", within_s=20)
    assert _resized(cluster.status())["status"] == "True"
    assert api.count(verb="create", resource="jobs") == 1  # the files stay where they are

    api.patch("modelcaches", "ml", "c", {"spec": {"storageSize": "5Gi"}})
    await api.until(
        lambda a: _resized(cluster.status()).get("reason") == "ShrinkRefused", within_s=20
    )
    condition = _resized(cluster.status())
    assert condition["status"] == "False"
    assert "cannot shrink" in condition["message"]
    assert _claim_request(api) == "20Gi"
    assert cluster.status()["phase"] == "Ready"  # still usable at its size

    api.patch("modelcaches", "ml", "c", {"spec": {"storageSize": "20480Mi"}})  # the same size
    await api.until(lambda a: _resized(cluster.status()).get("reason") == "Applied", within_s=20)
    assert _resized(cluster.status())["status"] == "True"
    assert api.count(verb="patch", resource="persistentvolumeclaims") == 1


async def test_an_expansion_the_apiserver_refuses_is_a_condition(cluster: Cluster) -> None:
    api = cluster.api
    apply(api, storageSize="10Gi")
    (job,) = await cluster.job_count(1)
    cluster.complete(job)
    await cluster.phase("Ready")
    message = "only dynamically provisioned pvc can be resized"
    api.inject(422, verb="patch", resource="persistentvolumeclaims", message=message)
    api.patch("modelcaches", "ml", "c", {"spec": {"storageSize": "20Gi"}})
    await api.until(
        lambda a: _resized(cluster.status()).get("reason") == "ExpansionRejected", within_s=20
    )
    assert message in _resized(cluster.status())["message"]
    assert cluster.status()["phase"] == "Ready"


async def test_an_existing_claim_is_reused_with_a_subdirectory(cluster: Cluster) -> None:
    api = cluster.api
    api.create("persistentvolumeclaims", {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "team", "namespace": "ml"},
        "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Ti"}}},
    })  # fmt: skip
    apply(api, existingClaimName="team", modelPath="llm/m")
    (job,) = await cluster.job_count(1)
    volume = job["spec"]["template"]["spec"]["volumes"][0]
    assert volume["persistentVolumeClaim"] == {"claimName": "team"}
    cluster.complete(job)
    status = await cluster.phase("Ready")
    assert status["path"] == "pvc://team/llm/m/huggingface/org/m"
    assert [c["metadata"]["name"] for c in api.objects("persistentvolumeclaims", "ml")] == ["team"]
    assert api.count(verb="create", resource="persistentvolumeclaims") == 0


async def test_a_missing_existing_claim_waits_pending(cluster: Cluster) -> None:
    apply(cluster.api, existingClaimName="nowhere")
    status = await cluster.phase("Pending")
    assert _ready(status)["reason"] == "ClaimNotFound"
    assert cluster.jobs() == []


async def test_a_failed_job_fails_the_cache_with_its_reason(cluster: Cluster) -> None:
    apply(cluster.api)
    (job,) = await cluster.job_count(1)
    cluster.complete(job, JOB_FAILED)
    status = await cluster.phase("Failed")
    assert _ready(status)["reason"] == "PrefetchFailed"
    assert "BackoffLimitExceeded" in _ready(status)["message"]
    assert job["metadata"]["name"] in _ready(status)["message"]


async def test_a_spec_change_runs_a_new_job_and_deletes_the_old(cluster: Cluster) -> None:
    api = cluster.api
    apply(api)
    (old,) = await cluster.job_count(1)
    cluster.complete(old)
    await cluster.phase("Ready")
    api.patch("modelcaches", "ml", "c", {"spec": {"source": "hf://org/other"}})
    status = await cluster.phase("Provisioning")
    (new,) = await cluster.job_count(1)
    assert new["metadata"]["name"] != old["metadata"]["name"]
    assert _ready(status)["observedGeneration"] == 2
    cluster.complete(new)
    status = await cluster.phase("Ready")
    assert status["path"] == "pvc://c-cache/c/huggingface/org/other"


async def test_node_local_runs_one_job_per_matching_node(cluster: Cluster) -> None:
    api = cluster.api
    node(api, "gpu-a", **{"nvidia.com/gpu.present": "true"})
    node(api, "gpu-b", **{"nvidia.com/gpu.present": "true"})
    node(api, "cpu-c")
    apply(api, storageStrategy="NodeLocal", hostPath="/data/models")
    jobs = await cluster.job_count(2)
    pinned = {j["spec"]["template"]["spec"]["nodeName"]: j for j in jobs}
    assert sorted(pinned) == ["gpu-a", "gpu-b"]
    volume = jobs[0]["spec"]["template"]["spec"]["volumes"][0]
    assert volume["hostPath"]["path"] == "/data/models"
    await cluster.phase("Provisioning", readyNodes=0, totalNodes=2)
    cluster.complete(pinned["gpu-a"])
    await cluster.phase("Provisioning", readyNodes=1, totalNodes=2)
    cluster.complete(pinned["gpu-b"])
    status = await cluster.phase("Ready", readyNodes=2, totalNodes=2)
    assert status["path"] == "file:///data/models/c/huggingface/org/m"


async def test_node_local_without_matching_nodes_waits(cluster: Cluster) -> None:
    apply(cluster.api, storageStrategy="NodeLocal")
    status = await cluster.phase("Pending")
    assert _ready(status)["reason"] == "NoMatchingNodes"
    node(cluster.api, "gpu-a", **{"nvidia.com/gpu.present": "true"})
    await cluster.job_count(1)  # the poll finds the node without any cache event


async def test_a_deleted_cache_takes_its_jobs_and_claim_along(cluster: Cluster) -> None:
    api = cluster.api
    apply(api)
    await cluster.job_count(1)
    await cluster.phase("Provisioning")
    api.delete("modelcaches", "ml", "c")
    await api.until(
        lambda a: not cluster.jobs() and a.get("persistentvolumeclaims", "ml", "c-cache") is None
    )


async def test_a_restart_mid_download_creates_nothing_twice(cluster: Cluster) -> None:
    api = cluster.api
    apply(api)
    (job,) = await cluster.job_count(1)
    await cluster.phase("Provisioning")
    await cluster.restart()
    await api.until(lambda a: a.count(verb="list", resource="modelcaches") >= 2)
    cluster.complete(job)
    await cluster.phase("Ready")
    assert api.count(verb="create", resource="jobs") == 1
    assert api.count(verb="create", resource="persistentvolumeclaims") == 1
    assert len(cluster.jobs()) == 1


@pytest.mark.parametrize("source", ["mlc://mlc-ai/m-MLC", "oras://ghcr.io/org/m:v1"])
async def test_an_unsupported_source_fails_naming_the_supported_ones(
    cluster: Cluster, source: str
) -> None:
    apply(cluster.api, source=source)
    status = await cluster.phase("Failed")
    assert _ready(status)["reason"] == "UnsupportedSource"
    assert "huggingface://" in _ready(status)["message"]
    assert cluster.jobs() == []
    assert cluster.api.objects("persistentvolumeclaims", "ml") == []


async def test_ephemeral_is_ready_with_nothing_created(cluster: Cluster) -> None:
    apply(cluster.api, storageStrategy="Ephemeral")
    status = await cluster.phase("Ready")
    assert _ready(status)["reason"] == "Ephemeral"
    assert cluster.jobs() == []
    assert cluster.api.objects("persistentvolumeclaims", "ml") == []


async def test_every_call_is_granted_by_the_controller_role(cluster: Cluster) -> None:
    api = cluster.api
    node(api, "gpu-a", **{"nvidia.com/gpu.present": "true"})
    apply(api, name="shared")
    apply(api, name="local", storageStrategy="NodeLocal")
    await cluster.job_count(2)
    for job in cluster.jobs():
        cluster.complete(job)
    await cluster.phase("Ready", name="shared")
    await cluster.phase("Ready", name="local")
    api.delete("modelcaches", "ml", "shared")
    await api.until(lambda a: a.get("persistentvolumeclaims", "ml", "shared-cache") is None)
    used = {(c.group, c.rbac_resource, c.verb) for c in api.calls}
    assert used <= rbac.grants(), sorted(used - rbac.grants())


def test_metadata_the_api_type_does_not_declare_is_left_behind() -> None:
    found = cache_manifest("c", source="hf://o/m")
    found["metadata"] |= {"managedFields": [{"manager": "kubectl"}], "ownerReferences": []}
    cache = parse_cache(found)
    assert cache is not None
    assert cache.spec.source == "hf://o/m"
    assert parse_cache(cache_manifest("c", source="hf://o/m", storageSize=7)) is None
