"""KubernetesModelStore through the official client against the shared fake apiserver."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from flexinfer_common.api import ModelPhase, ModelStatus
from flexinfer_common.errors import ConflictError, InvalidSpecError, StoreError
from flexinfer_common.store import EndpointRecord
from flexinfer_common.testing.kube_apiserver import KubeApiServer, find_crd_dir
from flexinfer_common.testing.kube_apiserver.fixtures import kube_apiserver_fixture
from flexinfer_common.testing.store_contract import (
    MODEL_STORE_CHECKS,
    Check,
    StoreFactory,
    Traits,
    make_model,
)
from flexinfer_common.testing.store_contract_catalog import CATALOG_STORE_CHECKS
from flexinfer_common.testing.store_contract_lora import ADAPTER_STORE_CHECKS
from flexinfer_controller.adapters.kube.endpoints import configmap_name
from flexinfer_controller.adapters.kube.resources import MODEL_FINALIZER
from flexinfer_controller.adapters.kube.store import KubernetesModelStore

apiserver = kube_apiserver_fixture([find_crd_dir(Path(__file__))])


@pytest.fixture
async def new_store(apiserver: KubeApiServer) -> AsyncIterator[StoreFactory]:
    """Stores (each its own client) on one fake apiserver; closed after the test."""
    made: list[KubernetesModelStore] = []

    def factory() -> KubernetesModelStore:
        made.append(KubernetesModelStore.connect(apiserver.url))
        return made[-1]

    try:
        yield factory
    finally:
        for store in made:
            await store.close()


@pytest.fixture
def store(new_store: StoreFactory) -> KubernetesModelStore:
    """One store."""
    made = new_store()
    assert isinstance(made, KubernetesModelStore)
    return made


@pytest.mark.parametrize(
    "check",
    [*MODEL_STORE_CHECKS, *ADAPTER_STORE_CHECKS, *CATALOG_STORE_CHECKS],
    ids=lambda c: c.__name__,
)
async def test_kubernetes_store_contract(check: Check, new_store: StoreFactory) -> None:
    await check(new_store, Traits(noop_write_bumps_version=False))


async def test_status_goes_through_the_subresource_without_bumping_generation(
    store: KubernetesModelStore, apiserver: KubeApiServer
) -> None:
    created = await store.create_model(make_model())
    before = apiserver.count(verb="patch", resource="models", subresource="status")
    updated = await store.update_status(
        "default", "llama", ModelStatus(phase=ModelPhase.READY), created.metadata.resource_version
    )
    assert apiserver.count(verb="patch", resource="models", subresource="status") == before + 1
    assert updated.metadata.generation == created.metadata.generation == 1
    stored = apiserver.get("models", "default", "llama")
    assert stored is not None
    assert stored["status"]["phase"] == "Ready"
    assert stored["metadata"]["generation"] == 1


async def test_status_in_a_create_is_written_through_the_subresource(
    store: KubernetesModelStore, apiserver: KubeApiServer
) -> None:
    model = make_model()
    model.status = ModelStatus(phase=ModelPhase.LOADING, message="warming")
    created = await store.create_model(model)
    assert created.status == model.status
    assert apiserver.count(verb="patch", resource="models", subresource="status") == 1


async def test_stale_write_maps_the_409_to_conflict_error(
    store: KubernetesModelStore, apiserver: KubeApiServer
) -> None:
    created = await store.create_model(make_model())
    apiserver.patch("models", "default", "llama", {"metadata": {"labels": {"by": "kubectl"}}})
    with pytest.raises(ConflictError, match="is stale"):
        await store.update_status(
            "default", "llama", ModelStatus(), created.metadata.resource_version
        )
    stale = created.model_copy(deep=True)
    stale.spec.backend = "other"
    with pytest.raises(ConflictError, match="is stale"):
        await store.replace_model(stale)
    stored = apiserver.get("models", "default", "llama")
    assert stored is not None
    assert stored["spec"]["backend"] == "vllm"
    assert stored["metadata"]["labels"] == {"team": "ml", "by": "kubectl"}


async def test_apiserver_errors_are_mapped(
    store: KubernetesModelStore, apiserver: KubeApiServer
) -> None:
    await store.create_model(make_model())
    apiserver.inject(500, verb="get", resource="models")
    with pytest.raises(StoreError, match="500"):
        await store.get_model("default", "llama")
    apiserver.inject(409, verb="patch", resource="models", subresource="status")
    with pytest.raises(ConflictError):
        await store.update_status("default", "llama", ModelStatus())
    assert (await store.get_model("default", "llama")).status == ModelStatus()
    bad = make_model("bad")
    apiserver.inject(422, verb="create", resource="models")
    with pytest.raises(InvalidSpecError):
        await store.create_model(bad)


async def test_finalizer_holds_the_model_until_removed(
    store: KubernetesModelStore, apiserver: KubeApiServer
) -> None:
    await store.create_model(make_model())
    held = await store.add_model_finalizer("default", "llama")
    assert held.metadata.finalizers == [MODEL_FINALIZER]
    assert (await store.add_model_finalizer("default", "llama")).metadata.finalizers == [
        MODEL_FINALIZER
    ]  # idempotent
    await store.delete_model("default", "llama")
    marked = await store.get_model("default", "llama")
    assert marked.metadata.deletion_timestamp is not None
    with pytest.raises(InvalidSpecError, match="no new finalizers"):
        await store.add_model_finalizer("default", "llama", "example.com/other")
    assert await store.remove_model_finalizer("default", "llama") is None
    assert apiserver.get("models", "default", "llama") is None
    assert await store.remove_model_finalizer("default", "llama") is None  # gone: nothing to do


async def test_finalizer_edit_retries_a_conflict(
    store: KubernetesModelStore, apiserver: KubeApiServer
) -> None:
    await store.create_model(make_model())
    apiserver.inject(409, verb="patch", resource="models", subresource=None, times=2)
    held = await store.add_model_finalizer("default", "llama")
    assert held.metadata.finalizers == [MODEL_FINALIZER]
    assert apiserver.count(verb="patch", resource="models", subresource=None) == 3


async def test_another_writers_finalizer_is_kept(
    store: KubernetesModelStore, apiserver: KubeApiServer
) -> None:
    """A finalizer added between our read and our write survives: we retry from a fresh read."""
    await store.create_model(make_model())

    def other_writer() -> None:
        apiserver.patch("models", "default", "llama", {"metadata": {"finalizers": ["x.io/keep"]}})

    apiserver.after(other_writer, verb="get", resource="models")
    held = await store.add_model_finalizer("default", "llama")
    assert held.metadata.finalizers == ["x.io/keep", MODEL_FINALIZER]


async def test_endpoints_live_in_one_configmap_per_model(
    store: KubernetesModelStore, apiserver: KubeApiServer
) -> None:
    at = datetime(2025, 1, 2, tzinfo=UTC)
    await store.create_model(make_model())
    await store.put_endpoint(EndpointRecord("default/llama", "pod-a", "http://a", True, "n1", at))
    await store.put_endpoint(
        EndpointRecord("default/llama", "weird id/1", "http://b", False, None, at)
    )
    (cm,) = apiserver.objects("configmaps")
    assert cm["metadata"]["name"] == configmap_name("llama")
    assert cm["metadata"]["annotations"]["flexinfer.ai/model"] == "default/llama"
    assert len(cm["data"]) == 2
    assert [e.replica for e in await store.list_endpoints("default/llama")] == [
        "pod-a",
        "weird id/1",
    ]
    model = apiserver.get("models", "default", "llama")
    assert model is not None
    assert (
        model["metadata"]["resourceVersion"]
        == (await store.get_model("default", "llama")).metadata.resource_version
    )
    await store.delete_model("default", "llama")
    assert apiserver.objects("configmaps") == []
    assert len(configmap_name("m" * 253)) <= 253
