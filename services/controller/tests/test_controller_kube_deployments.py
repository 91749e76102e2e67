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
from flexinfer_controller.legacy.modelcache.testing import cache_manifest
from flexinfer_controller.runtime.kubernetes.harness import running_cluster

apiserver = kube_apiserver_fixture([find_crd_dir(Path(__file__))])


def deployment_body(name: str = "tiny") -> dict[str, Any]:
    """A reference-backend ModelDeployment keeping one replica warm."""
    return {
        "apiVersion": "ai.flexinfer/v1alpha1",
        "kind": "ModelDeployment",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "backend": "reference",
            "model": "file:///var/lib/flexinfer/models/tiny",
            "minReplicas": 1,
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
