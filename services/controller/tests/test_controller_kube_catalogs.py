"""ModelCatalogs on Kubernetes: informers, Secrets and the status subresource, against the
shared fake apiserver and a real OCI registry. Catalogs are written to the apiserver as
kubectl would; the controller learns of them from its informers only."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from flexinfer_common.testing.kube_apiserver import KubeApiServer, find_crd_dir
from flexinfer_common.testing.kube_apiserver.fixtures import kube_apiserver_fixture
from flexinfer_common.testing.oci_push import ModelPusher, safetensors_bytes
from flexinfer_common.testing.oci_registry import TestRegistry, serve_registry
from flexinfer_controller.adapters.kube.catalogs import ApiServerSecrets
from flexinfer_controller.adapters.kube.store import KubernetesModelStore
from flexinfer_controller.catalog.controller import CatalogController
from flexinfer_controller.catalog.reference import parse_registry_url
from flexinfer_controller.catalog.settings import CatalogSettings
from flexinfer_controller.catalog.wiring import catalog_controller
from flexinfer_controller.kube_settings import KubernetesSettings
from flexinfer_controller.runtime.registry import runtime_plugin
from flexinfer_controller.settings import ControllerSettings
from flexinfer_controller.testing import eventually

apiserver = kube_apiserver_fixture([find_crd_dir(Path(__file__))])
WEIGHTS = safetensors_bytes({"w": (4, 4)})


@dataclass
class Cluster:
    """The fake apiserver, an open and a locked registry, and the running catalog loop."""

    api: KubeApiServer
    open_url: str
    locked_url: str
    loop: CatalogController

    def catalog(self, name: str = "team") -> dict[str, Any]:
        """The stored ModelCatalog, as kubectl would get it."""
        found = self.api.get("modelcatalogs", "ml", name)
        assert found is not None
        return found

    async def synced(self, generation: int, name: str = "team") -> dict[str, Any]:
        """The catalog once its Synced condition observed ``generation``."""

        def done(api: KubeApiServer) -> bool:
            found = api.get("modelcatalogs", "ml", name) or {}
            conditions = (found.get("status") or {}).get("conditions") or []
            return any(
                c["type"] == "Synced" and c.get("observedGeneration") == generation
                for c in conditions
            )

        await self.api.until(done, within_s=20)
        return self.catalog(name)


@pytest.fixture
async def cluster(apiserver: KubeApiServer) -> AsyncIterator[Cluster]:
    """Registries served, the controller's catalog loop built as create_app builds it."""
    locked = TestRegistry(auth="basic", users={"u": "pw"})
    async with serve_registry(TestRegistry()) as open_url, serve_registry(locked) as locked_url:
        await ModelPusher(open_url).push_model("models/a", "v1", {"w": WEIGHTS})
        await ModelPusher(open_url).push_model("emb/b", "v1", {"w": WEIGHTS})
        await ModelPusher(locked_url, "u", "pw").push_model("private/c", "v1", {"w": WEIGHTS})
        settings = ControllerSettings(
            runtime="kubernetes",
            kubernetes=KubernetesSettings(host=apiserver.url),
            # No periodic resync in the test's lifetime: the informer alone must drive it.
            catalog=CatalogSettings(resync_interval_s=3600, retry_initial_s=0.1),
        )
        store = KubernetesModelStore.connect(apiserver.url)
        sources = runtime_plugin(settings).catalogs(settings, store)
        assert isinstance(sources.secrets, ApiServerSecrets)
        loop = catalog_controller(settings.catalog, store, sources)
        await loop.start()
        try:
            yield Cluster(apiserver, open_url, locked_url, loop)
        finally:
            await loop.stop()
            await store.close()


def pull_secret(registry_url: str, user: str, password: str) -> dict[str, Any]:
    """A kubernetes.io/dockerconfigjson Secret for ``registry_url``."""
    host = parse_registry_url(registry_url).registry
    auth = base64.b64encode(f"{user}:{password}".encode()).decode()
    doc = json.dumps({"auths": {host: {"auth": auth}}}).encode()
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "pull", "namespace": "ml"},
        "type": "kubernetes.io/dockerconfigjson",
        "data": {".dockerconfigjson": base64.b64encode(doc).decode()},
    }


def catalog_body(*registries: dict[str, Any], **spec: Any) -> dict[str, Any]:
    """A ModelCatalog as kubectl would apply it, in namespace ml."""
    return {
        "apiVersion": "ai.flexinfer/v1alpha2",
        "kind": "ModelCatalog",
        "metadata": {"name": "team", "namespace": "ml"},
        "spec": {"registries": list(registries), **spec},
    }


async def test_an_applied_catalog_syncs_with_its_secret_through_the_status_subresource(
    cluster: Cluster,
) -> None:
    api = cluster.api
    api.create("secrets", pull_secret(cluster.locked_url, "u", "pw"))
    api.create("modelcatalogs", catalog_body(
        {"type": "OCI", "url": cluster.open_url},
        {"type": "OCI", "url": cluster.locked_url, "secretRef": "pull"},
        {"type": "HuggingFace", "secretRef": "hf-token"},
    ))  # fmt: skip
    status = (await cluster.synced(1))["status"]
    names = sorted((e["registry"], e["name"]) for e in status["entries"])
    assert names == sorted([
        (cluster.open_url, "emb/b:v1"),
        (cluster.open_url, "models/a:v1"),
        (cluster.locked_url, "private/c:v1"),
    ])  # fmt: skip
    assert status["totalModels"] == 3
    assert "lastSyncTime" in status
    synced = next(c for c in status["conditions"] if c["type"] == "Synced")
    assert (synced["status"], synced["reason"]) == ("False", "RegistryTypeNotSupported")
    assert "HuggingFace failed" in synced["message"]
    assert api.count(verb="patch", resource="modelcatalogs", subresource="status") == 1
    assert api.count(verb="patch", resource="modelcatalogs", subresource=None) == 0
    # The Secret is read by name, never listed or watched (the test's create is no call).
    assert api.count(resource="secrets") == api.count(verb="get", resource="secrets") == 1


async def test_a_refused_secret_is_reported_and_a_spec_edit_resyncs(cluster: Cluster) -> None:
    api = cluster.api
    api.create("secrets", pull_secret(cluster.locked_url, "u", "wrong"))
    locked = {"type": "OCI", "url": cluster.locked_url, "secretRef": "pull"}
    api.create("modelcatalogs", catalog_body({"type": "OCI", "url": cluster.open_url}, locked))
    first = (await cluster.synced(1))["status"]
    synced = next(c for c in first["conditions"] if c["type"] == "Synced")
    assert (synced["status"], synced["reason"]) == ("False", "AuthenticationFailed")
    assert cluster.locked_url in synced["message"]
    assert first["totalModels"] == 2
    # kubectl edit: the informer reports the new generation, which syncs at once.
    api.patch("modelcatalogs", "ml", "team", {"spec": {"filter": {"namePattern": "emb/*"}}})
    second = (await cluster.synced(2))["status"]
    assert [e["name"] for e in second["entries"]] == ["emb/b:v1"]


async def test_a_deleted_catalog_stops_syncing(cluster: Cluster) -> None:
    api = cluster.api
    api.create("modelcatalogs", catalog_body(
        {"type": "OCI", "url": cluster.open_url}, syncInterval="1s",
    ))  # fmt: skip
    await cluster.synced(1)
    api.delete("modelcatalogs", "ml", "team")
    loop, key = cluster.loop, "ml/team"
    await eventually(lambda: loop.queue.idle(key), timeout_s=10)
    syncs = loop.reconciler.syncs
    assert await loop.queue.wait_done(key, loop.enqueue(key), 10)
    assert loop.reconciler.syncs == syncs
    assert api.get("modelcatalogs", "ml", "team") is None
