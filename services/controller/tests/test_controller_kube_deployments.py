"""The legacy kinds through the whole controller (create_app, runtime=kubernetes) on the fake
apiserver and its kubelet: the bridge's Model is served by the Model controller, its Ready
status comes back as Running, and a delete waits for the Model's own cleanup; a ModelCache
gets its PVC and download Job."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from flexinfer_common.api import MODEL_FINALIZER
from flexinfer_common.testing.kube_apiserver import KubeApiServer, find_crd_dir
from flexinfer_common.testing.kube_apiserver.fixtures import kube_apiserver_fixture
from flexinfer_controller.kube_settings import KubernetesSettings
from flexinfer_controller.legacy.modelcache.testing import cache_manifest
from flexinfer_controller.runtime.kubernetes.harness import running_cluster
from flexinfer_controller.runtime.kubernetes.kubelet import JOB_COMPLETE, JOB_FAILED

apiserver = kube_apiserver_fixture([find_crd_dir(Path(__file__))])


def deployment_body(name: str = "tiny", **spec: Any) -> dict[str, Any]:
    """A reference-backend ModelDeployment keeping one replica warm."""
    return {
        "apiVersion": "ai.flexinfer/v1alpha1",
        "kind": "ModelDeployment",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "backend": "reference",
            "model": "file:///var/lib/flexinfer/models/tiny",
            "minReplicas": 1,
            **spec,
        },
    }


def phase(api: KubeApiServer, resource: str, name: str = "tiny") -> str | None:
    """status.phase of a stored object."""
    return ((api.get(resource, "default", name) or {}).get("status") or {}).get("phase")


async def test_a_deployment_is_served_and_deleted_through_its_model(
    apiserver: KubeApiServer,
) -> None:
    api = apiserver
    async with running_cluster(api):
        api.create("modeldeployments", deployment_body())
        await api.until(lambda a: phase(a, "models") == "Ready", within_s=30)
        await api.until(lambda a: phase(a, "modeldeployments") == "Running", within_s=30)
        found = api.get("models", "default", "tiny") or {}
        assert MODEL_FINALIZER in found["metadata"]["finalizers"]  # the Model controller's
        conditions = (api.get("modeldeployments", "default", "tiny") or {})["status"]["conditions"]
        assert {c["type"]: c["status"] for c in conditions}["Ready"] == "True"

        api.delete("modeldeployments", "default", "tiny")
        await api.until(
            lambda a: (
                a.get("modeldeployments", "default", "tiny") is None
                and a.get("models", "default", "tiny") is None
            ),
            within_s=30,
        )
        assert api.objects("deployments", "default") == []


async def test_the_controller_reconciles_a_modelcache(apiserver: KubeApiServer) -> None:
    """The legacy loops are wired together: a ModelCache gets its PVC and download Job."""
    api = apiserver
    manifest = cache_manifest("qwen", "default", source="hf://Qwen/Qwen2.5-0.5B")
    async with running_cluster(api):
        api.create("modelcaches", manifest)
        await api.until(lambda a: phase(a, "modelcaches", "qwen") == "Provisioning")
        assert [c["metadata"]["name"] for c in api.objects("persistentvolumeclaims", "default")]
        assert len(api.objects("jobs", "default")) == 1


def condition(api: KubeApiServer, resource: str, kind: str, name: str = "tiny") -> dict[str, Any]:
    """The condition ``kind`` of a stored object's status (empty when absent)."""
    status = (api.get(resource, "default", name) or {}).get("status") or {}
    return next((c for c in status.get("conditions") or [] if c["type"] == kind), {})


def fast_polls(api: KubeApiServer) -> KubernetesSettings:
    """The harness's settings, with running Jobs read again every 0.1 s."""
    return KubernetesSettings(host=api.url, namespaces=["default"], job_poll_s=0.1)


async def test_a_deployment_waits_for_its_modelcache_then_mounts_it(
    apiserver: KubeApiServer,
) -> None:
    api = apiserver
    body = deployment_body(model="Qwen/Qwen2.5-0.5B", modelCacheRef="qwen")
    async with running_cluster(api, kubernetes=fast_polls(api)):
        api.create("modeldeployments", body)
        await api.until(
            lambda a: condition(a, "models", "Cached").get("reason") == "ModelCacheNotFound",
            within_s=30,
        )
        assert (
            "ModelCache default/qwen does not exist"
            in condition(api, "models", "Cached")["message"]
        )
        assert phase(api, "models") == "Pending"

        api.create(
            "modelcaches", cache_manifest("qwen", "default", source="hf://Qwen/Qwen2.5-0.5B")
        )
        await api.until(
            lambda a: "is Provisioning" in condition(a, "models", "Cached").get("message", ""),
            within_s=30,
        )
        assert condition(api, "models", "Cached")["reason"] == "ModelCacheNotReady"
        await api.until(lambda a: phase(a, "modeldeployments") == "Pending", within_s=30)
        # Nothing started and nothing fetched twice: no Deployment, the cache's Job alone.
        assert api.objects("deployments", "default") == []
        assert api.objects("pods", "default") == []
        (job,) = api.objects("jobs", "default")
        assert job["metadata"]["labels"]["flexinfer.ai/modelcache"] == "qwen"

        api.set_status("jobs", "default", job["metadata"]["name"], JOB_COMPLETE)
        await api.until(lambda a: phase(a, "models") == "Ready", within_s=30)
        await api.until(lambda a: phase(a, "modeldeployments") == "Running", within_s=30)
        model = api.get("models", "default", "tiny") or {}
        assert model["spec"]["source"] == "pvc://qwen-cache/qwen/huggingface/Qwen/Qwen2.5-0.5B"
        assert "flexinfer.ai/source-hold" not in model["metadata"].get("annotations", {})
        (deployment,) = api.objects("deployments", "default")
        volumes = deployment["spec"]["template"]["spec"]["volumes"]
        claims = [v["persistentVolumeClaim"]["claimName"] for v in volumes
                  if "persistentVolumeClaim" in v]  # fmt: skip
        assert claims == ["qwen-cache"]
        assert len(api.objects("jobs", "default")) == 1  # the Model ran no prefetch of its own


async def test_a_failed_modelcache_fails_the_deployment_with_its_message(
    apiserver: KubeApiServer,
) -> None:
    api = apiserver
    api.create("modelcaches", cache_manifest("qwen", "default", source="hf://Qwen/Qwen2.5-0.5B"))
    async with running_cluster(api, kubernetes=fast_polls(api)):
        api.create("modeldeployments", deployment_body(modelCacheRef="qwen"))
        await api.until(lambda a: len(a.objects("jobs", "default")) == 1, within_s=30)
        (job,) = api.objects("jobs", "default")
        api.set_status("jobs", "default", job["metadata"]["name"], JOB_FAILED)
        await api.until(lambda a: phase(a, "modeldeployments") == "Failed", within_s=30)
        ready = condition(api, "modeldeployments", "Ready")
        assert ready["reason"] == "ModelCacheFailed"
        assert "ModelCache default/qwen failed" in ready["message"]
        assert "BackoffLimitExceeded" in ready["message"]
        await api.until(lambda a: phase(a, "models") == "Failed", within_s=30)
        assert api.objects("deployments", "default") == []
