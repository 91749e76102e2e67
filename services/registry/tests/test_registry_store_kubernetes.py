"""The Kubernetes stores through the real ``kubernetes`` client against the shared fake apiserver.

There is no kube-apiserver here, so the tests start ``KubeApiServer`` (flexinfer_common.testing):
a real HTTP server speaking the Kubernetes REST protocol, serving the CRDs committed in
k8s/crds (schema validation, the ``self == oldSelf`` immutability rules, the status
subresource, resourceVersion preconditions, label selectors).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from flexinfer_common.errors import ConfigError, InvalidSpecError, StoreError
from flexinfer_common.testing.kube_apiserver import KubeApiServer, find_crd_dir
from flexinfer_common.testing.kube_apiserver.fixtures import kube_apiserver_fixture
from flexinfer_registry.adapters.kubernetes_api import KubeApi
from flexinfer_registry.adapters.stores import create_stores
from flexinfer_registry.adapters.stores.kubernetes import (
    MODEL_CACHE_ENTRY,
    MODEL_METADATA,
    KubernetesModelStore,
    KubernetesSourceStore,
)
from flexinfer_registry.adapters.stores.rfc3339 import format_ts
from flexinfer_registry.core.records import ModelStatus, Provider, SourceQuery, SourceStatus
from flexinfer_registry.core.store import ModelRegistryStore, SourceStore, Stores
from flexinfer_registry.settings import RegistrySettings
from flexinfer_registry.testing.replicas import check_exactly_once, check_whole_records
from flexinfer_registry.testing.store_contract import (
    MODEL_STORE_CHECKS,
    SOURCE_STORE_CHECKS,
    T0,
    ModelStoreCheck,
    SourceStoreCheck,
    source,
)

apiserver = kube_apiserver_fixture([find_crd_dir(Path(__file__))])


@pytest.mark.parametrize("check", MODEL_STORE_CHECKS, ids=lambda c: c.__name__)
async def test_kubernetes_model_store_contract(
    check: ModelStoreCheck, apiserver: KubeApiServer
) -> None:
    url = apiserver.url

    async def open_store() -> ModelRegistryStore:
        return KubernetesModelStore(KubeApi(host=url), "registry")

    await check(open_store)


@pytest.mark.parametrize("check", SOURCE_STORE_CHECKS, ids=lambda c: c.__name__)
async def test_kubernetes_source_store_contract(
    check: SourceStoreCheck, apiserver: KubeApiServer
) -> None:
    url = apiserver.url

    async def open_store() -> SourceStore:
        return KubernetesSourceStore(KubeApi(host=url), "registry")

    await check(open_store)


async def test_cache_entry_is_a_custom_resource(apiserver: KubeApiServer) -> None:
    url = apiserver.url
    store = KubernetesModelStore(KubeApi(host=url), "registry")
    try:
        assert await store.try_claim("Meta/Llama-3:8B", Provider.HUGGING_FACE, now=T0)
        await store.set_status(
            "Meta/Llama-3:8B", Provider.NGC, ModelStatus.DOWNLOADED, None, now=T0 + 2
        )
        (obj,) = apiserver.objects()
        assert obj["kind"] == MODEL_CACHE_ENTRY.kind
        assert obj["metadata"]["namespace"] == "registry"
        assert obj["metadata"]["name"].startswith("mx-cache-meta-llama-3-8b-")
        assert obj["spec"] == {"modelName": "Meta/Llama-3:8B", "provider": "HUGGING_FACE"}
        assert obj["status"]["phase"] == "DOWNLOADED"
        assert obj["status"]["provider"] == "NGC"
        # Names that sanitise alike are still distinct entries.
        assert store.object_name("a/b") != store.object_name("a-b")
        assert len(store.object_name("x" * 500)) <= 63
    finally:
        await store.close()


async def test_fake_enforces_immutability_and_schema(apiserver: KubeApiServer) -> None:
    """The fake can fail the store: immutable spec and enum violations are 422s."""
    url = apiserver.url
    api = KubeApi(host=url)
    objects = api.objects(MODEL_CACHE_ENTRY, "registry")
    try:
        body = {"metadata": {"name": "x"}, "spec": {"modelName": "m", "provider": "S3"}}
        await objects.create(body)
        with pytest.raises(InvalidSpecError, match="immutable"):
            await objects.patch("x", {"spec": {"provider": "GCS"}})
        with pytest.raises(InvalidSpecError):
            await objects.patch_status("x", {"status": {"phase": "FINE"}})
        with pytest.raises(InvalidSpecError):
            await objects.create(
                {"metadata": {"name": "y"}, "spec": {"modelName": "m", "provider": "FTP"}}
            )
    finally:
        await api.close()


async def test_claim_survives_an_entry_without_status(apiserver: KubeApiServer) -> None:
    """A claimer that died right after the create leaves an entry that reads DOWNLOADING."""
    url = apiserver.url
    store = KubernetesModelStore(KubeApi(host=url), "registry")
    try:
        assert await store.try_claim("m", Provider.S3, now=T0)
        (obj,) = apiserver.objects(MODEL_CACHE_ENTRY.plural)
        # As if the status patch never happened.
        apiserver.edit(obj["kind"], "registry", obj["metadata"]["name"], lambda o: o.pop("status"))
        record = await store.get("m")
        assert record is not None
        assert record.status == ModelStatus.DOWNLOADING
        assert record.created_at == T0
        assert record.updated_at == T0
        assert ModelStatus.DOWNLOADED not in await store.status_counts()
        assert not await store.try_claim("m", Provider.S3, now=T0 + 10, stale_after=60)
        assert await store.try_claim("m", Provider.S3, now=T0 + 61, stale_after=60)
    finally:
        await store.close()


async def test_worker_is_a_custom_resource_with_ready_condition(
    apiserver: KubeApiServer,
) -> None:
    url = apiserver.url
    store = KubernetesSourceStore(KubeApi(host=url), "registry")
    try:
        record = source("worker-0", status=SourceStatus.INITIALIZING)
        await store.publish(record)
        assert await store.update_status(
            record.mx_source_id, "worker-0", SourceStatus.READY, 0.5, now=T0 + 1
        )
        (obj,) = apiserver.objects()
        assert obj["kind"] == MODEL_METADATA.kind
        assert obj["metadata"]["labels"]["ai.flexinfer/mx-source-id"] == record.mx_source_id
        (ready,) = obj["status"]["conditions"]
        assert (ready["type"], ready["status"]) == ("Ready", "True")
        assert obj["status"]["sourceLoad"] == 0.5
    finally:
        await store.close()


async def test_reaper_loses_to_a_heartbeat(apiserver: KubeApiServer) -> None:
    """mark_stale patches at the resourceVersion it judged: a heartbeat in between wins."""
    url = apiserver.url
    store = KubernetesSourceStore(KubeApi(host=url), "registry")
    try:
        await store.publish(source("w", updated_at=T0))
        name = store.object_name(source("w").mx_source_id, "w")

        def heartbeat() -> None:
            patch = {"status": {"updatedAt": format_ts(T0 + 95)}}
            apiserver.patch(MODEL_METADATA.plural, "registry", name, patch, subresource="status")

        # The heartbeat lands between the reaper's list and its conditional patch.
        apiserver.after(heartbeat, verb="list", resource=MODEL_METADATA.plural)
        assert await store.mark_stale(90, now=T0 + 100) == 0
        assert await store.mark_stale(90, now=T0 + 200) == 1
    finally:
        await store.close()


async def test_unreachable_apiserver_is_a_store_error() -> None:
    store = KubernetesModelStore(KubeApi(host="http://127.0.0.1:1"), "registry")
    try:
        with pytest.raises(StoreError, match="kubernetes"):
            await store.get("m")
    finally:
        await store.close()


async def test_list_by_source_and_rank_uses_labels(apiserver: KubeApiServer) -> None:
    url = apiserver.url
    store = KubernetesSourceStore(KubeApi(host=url), "registry")
    try:
        await store.publish(source("a", rank=0))
        await store.publish(source("b", rank=1))
        await store.publish(source("c", rank=1, mx_source_id="ffff000000000000"))
        ones = await store.list(SourceQuery(mx_source_id="0123456789abcdef", worker_rank=1))
        assert [r.worker_id for r in ones] == ["b"]
    finally:
        await store.close()


@pytest.mark.parametrize("missing_files", [False, True], ids=["fresh", "missing-files"])
async def test_kubernetes_exactly_once_across_two_replicas(
    apiserver: KubeApiServer, tmp_path: Path, missing_files: bool
) -> None:
    """100 EnsureModelDownloaded calls over two registry apps sharing one apiserver."""
    url = apiserver.url
    stores = Stores(
        models=KubernetesModelStore(KubeApi(host=url), "registry"),
        sources=KubernetesSourceStore(KubeApi(host=url), "registry"),
    )
    try:
        await check_exactly_once(stores, tmp_path / "cache", missing_files=missing_files)
    finally:
        await stores.close()


async def test_kubernetes_set_status_never_leaves_a_partial_record(
    apiserver: KubeApiServer,
) -> None:
    url = apiserver.url
    await check_whole_records(
        KubernetesModelStore(KubeApi(host=url), "registry"),
        KubernetesModelStore(KubeApi(host=url), "registry"),
        writes=40,
    )


async def test_create_stores_from_kubeconfig(
    apiserver: KubeApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """store=kubernetes outside a cluster follows $KUBECONFIG, in the configured namespace."""
    url = apiserver.url
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "fake", "cluster": {"server": url}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "fake", "user": "u"}}],
        "current-context": "c",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(kubeconfig), encoding="utf-8")
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(path))
    settings = RegistrySettings(store="kubernetes", kubernetes_namespace="mx")
    stores = await create_stores(settings)
    try:
        assert isinstance(stores.models, KubernetesModelStore)
        assert await stores.models.try_claim("m", Provider.GCS, now=T0)
        assert {o["metadata"]["namespace"] for o in apiserver.objects()} == {"mx"}
    finally:
        await stores.close()
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    with pytest.raises(ConfigError, match="no Kubernetes configuration"):
        await create_stores(settings)
