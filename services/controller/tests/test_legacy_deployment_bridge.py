"""The ModelDeployment bridge against the shared fake apiserver, on its own: ModelDeployments
applied as kubectl would become Models equal to ``to_model``, and a Model's status, as the
Model controller would write it (``set_status``), flows back. Every wait is on a condition."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from flexinfer_common.api import DEPLOYMENT_FINALIZER, MODEL_FINALIZER, Model, ModelSpec, to_model
from flexinfer_common.kube.client import KubeClient
from flexinfer_common.testing.kube_apiserver import KubeApiServer, find_crd_dir
from flexinfer_common.testing.kube_apiserver.fixtures import kube_apiserver_fixture
from flexinfer_controller.adapters.kube.deployments import deployment_bridge
from flexinfer_controller.legacy.deployments import MANAGED_LABEL, parse_deployment
from flexinfer_controller.runtime.kubernetes.harness import model_body
from flexinfer_controller.runtime.kubernetes.names import FLASH_NODES_ANNOTATION

apiserver = kube_apiserver_fixture([find_crd_dir(Path(__file__))])
Obj = dict[str, Any]


def deployment_body(name: str = "chat", **spec: Any) -> Obj:
    """A v1alpha1 ModelDeployment, as kubectl would apply it."""
    return {
        "apiVersion": "ai.flexinfer/v1alpha1",
        "kind": "ModelDeployment",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"backend": "vllm", "model": "org/chat-7b", **spec},
    }


@asynccontextmanager
async def running_bridge(api: KubeApiServer) -> AsyncIterator[None]:
    """The bridge on ``api`` (its own connection pool) until the block ends."""
    client = KubeClient(api.url)
    bridge = deployment_bridge(client, ["default"])
    await bridge.start()
    try:
        yield
    finally:
        await bridge.stop()
        await client.close()


@pytest.fixture
async def bridged(apiserver: KubeApiServer) -> AsyncIterator[KubeApiServer]:
    """The fake apiserver with the bridge running on it."""
    async with running_bridge(apiserver):
        yield apiserver


def deployment(api: KubeApiServer, name: str = "chat") -> Obj | None:
    """The stored ModelDeployment."""
    return api.get("modeldeployments", "default", name)


def model(api: KubeApiServer, name: str = "chat") -> Obj | None:
    """The stored Model."""
    return api.get("models", "default", name)


def status_of(api: KubeApiServer, name: str = "chat") -> Obj:
    """The ModelDeployment's status (empty before the first write)."""
    return dict((deployment(api, name) or {}).get("status") or {})


def ready(status: Obj) -> Obj:
    """The Ready condition of a ModelDeployment status."""
    return next(c for c in status.get("conditions") or [] if c["type"] == "Ready")


def expected_spec(api: KubeApiServer, name: str = "chat") -> Model:
    """``to_model`` of the stored ModelDeployment."""
    found = deployment(api, name)
    assert found is not None
    return to_model(parse_deployment(found))


def spec_is_converted(name: str = "chat") -> Callable[[KubeApiServer], bool]:
    """Whether the stored Model's spec is to_model's of the stored ModelDeployment."""

    def check(api: KubeApiServer) -> bool:
        found = model(api, name)
        if found is None:
            return False
        return ModelSpec.model_validate(found["spec"]) == expected_spec(api, name).spec

    return check


async def test_a_deployment_gets_its_model_and_spec_edits_follow(bridged: KubeApiServer) -> None:
    api = bridged
    api.create("modeldeployments", deployment_body(replicas=2))
    await api.until(spec_is_converted(), within_s=20)
    found, md = model(api), deployment(api)
    assert found is not None
    assert md is not None
    assert found["metadata"]["labels"][MANAGED_LABEL] == "modeldeployment"
    owner = found["metadata"]["ownerReferences"]
    uid = md["metadata"]["uid"]
    assert owner == [{"apiVersion": "ai.flexinfer/v1alpha1", "kind": "ModelDeployment",
                      "name": "chat", "uid": uid, "controller": True}]  # fmt: skip
    assert found["spec"]["source"] == "hf://org/chat-7b"
    assert found["metadata"].get("finalizers") is None  # the MD's finalizer stays on the MD
    assert md["metadata"]["finalizers"] == [DEPLOYMENT_FINALIZER]
    await api.until(lambda a: status_of(a).get("phase") == "Pending", within_s=20)
    assert ready(status_of(api))["reason"] == "Reconciling"

    api.patch("modeldeployments", "default", "chat", {"spec": {"replicas": 3, "model": "org/b"}})
    await api.until(
        lambda a: (model(a) or {})["spec"]["source"] == "hf://org/b" and spec_is_converted()(a),
        within_s=20,
    )
    assert (model(api) or {})["spec"]["serverless"]["maxReplicas"] == 3
    assert api.count(verb="create", resource="models") == 1


async def test_the_controllers_own_annotations_are_kept(bridged: KubeApiServer) -> None:
    api = bridged
    api.create("modeldeployments", deployment_body())
    await api.until(spec_is_converted(), within_s=20)
    # The Model controller records where the Model's node-tmpfs copies are.
    notes = {FLASH_NODES_ANNOTATION: "gpu-1"}
    api.patch("models", "default", "chat", {"metadata": {"annotations": notes}})

    api.patch("modeldeployments", "default", "chat", {"spec": {"model": "org/b"}})
    await api.until(lambda a: (model(a) or {})["spec"]["source"] == "hf://org/b", within_s=20)
    assert (model(api) or {})["metadata"]["annotations"][FLASH_NODES_ANNOTATION] == "gpu-1"


async def test_the_models_status_is_mirrored(bridged: KubeApiServer) -> None:
    api = bridged
    api.create("modeldeployments", deployment_body())
    await api.until(spec_is_converted(), within_s=20)
    generation = (model(api) or {})["metadata"]["generation"]
    condition = {"type": "Ready", "status": "True", "reason": "EngineReady",
                 "message": "1/1 replicas ready",
                 "lastTransitionTime": "2025-01-01T00:00:00Z"}  # fmt: skip
    api.set_status("models", "default", "chat", {
        "phase": "Ready", "observedGeneration": generation, "conditions": [condition],
        "endpoint": "http://chat.default.svc:8000", "readyReplicas": 1, "replicas": 1,
    })  # fmt: skip
    await api.until(lambda a: status_of(a).get("phase") == "Running", within_s=20)
    status = status_of(api)
    md_generation = (deployment(api) or {})["metadata"]["generation"]
    assert ready(status) == {**condition, "observedGeneration": md_generation}
    assert status["endpoints"] == {"internal": "http://chat.default.svc:8000"}

    failed = {**condition, "status": "False", "reason": "CrashLoop", "message": "exit 1"}
    api.set_status("models", "default", "chat", {
        "phase": "Failed", "observedGeneration": generation, "conditions": [failed],
    })  # fmt: skip
    await api.until(lambda a: status_of(a).get("phase") == "Failed", within_s=20)
    assert ready(status_of(api))["reason"] == "CrashLoop"


def _hold(api: KubeApiServer, name: str = "chat") -> None:
    """Put the Model controller's cleanup finalizer on the Model, as it would."""
    api.patch("models", "default", name, {"metadata": {"finalizers": [MODEL_FINALIZER]}})


def _release(api: KubeApiServer, name: str = "chat") -> None:
    """The Model controller's cleanup is done: its finalizer comes off."""
    api.patch("models", "default", name, {"metadata": {"finalizers": []}})


def _model_deleting(api: KubeApiServer) -> bool:
    return bool((model(api) or {}).get("metadata", {}).get("deletionTimestamp"))


async def test_delete_waits_until_the_model_is_gone(bridged: KubeApiServer) -> None:
    api = bridged
    api.create("modeldeployments", deployment_body())
    await api.until(spec_is_converted(), within_s=20)
    _hold(api)
    api.delete("modeldeployments", "default", "chat")
    await api.until(_model_deleting, within_s=20)
    await api.until(lambda a: status_of(a).get("phase") == "Terminating", within_s=20)
    assert deployment(api) is not None  # held by its finalizer while the Model cleans up

    _release(api)
    await api.until(lambda a: deployment(a) is None and model(a) is None, within_s=20)
    assert api.count(verb="delete", resource="models") == 1


async def test_a_model_it_does_not_manage_is_never_overwritten(bridged: KubeApiServer) -> None:
    api = bridged
    api.create("models", model_body("chat"))
    before = model(api)
    api.create("modeldeployments", deployment_body())
    await api.until(lambda a: status_of(a).get("phase") == "Failed", within_s=20)
    assert ready(status_of(api))["reason"] == "ModelNotManaged"
    assert "default/chat exists and is not managed" in ready(status_of(api))["message"]
    assert model(api) == before
    assert api.count(verb="patch", resource="models") == 0

    api.delete("models", "default", "chat")  # the name is freed: the bridge takes it
    await api.until(spec_is_converted(), within_s=20)
    await api.until(lambda a: status_of(a).get("phase") == "Pending", within_s=20)

    api.delete("modeldeployments", "default", "chat")  # its unmanaged namesake stays
    api.create("models", model_body("other"))
    api.create("modeldeployments", deployment_body("other"))
    await api.until(lambda a: status_of(a, "other").get("phase") == "Failed", within_s=20)
    api.delete("modeldeployments", "default", "other")
    await api.until(lambda a: deployment(a, "other") is None, within_s=20)
    assert model(api, "other") is not None


async def test_an_invalid_deployment_fails_once_without_retries(bridged: KubeApiServer) -> None:
    api = bridged
    api.create("modeldeployments", deployment_body("bad", model="org/chat\u0007"))
    await api.until(lambda a: status_of(a, "bad").get("phase") == "Failed", within_s=20)
    condition = ready(status_of(api, "bad"))
    assert condition["reason"] == "ValidationFailed"
    assert "model must not contain control characters" in condition["message"]
    assert model(api, "bad") is None

    # A later deployment's whole pass is a point after which a hot retry would have shown.
    # How many passes the creation took depends on when the informer's list met its watch
    # (an early event may be seen twice); after that, "bad" must be read no more.
    api.create("modeldeployments", deployment_body("good"))
    await api.until(lambda a: status_of(a, "good").get("phase") == "Pending", within_s=20)
    reads = api.count(verb="get", resource="modeldeployments", name="bad")
    api.create("modeldeployments", deployment_body("later"))
    await api.until(lambda a: status_of(a, "later").get("phase") == "Pending", within_s=20)
    assert api.count(verb="patch", resource="modeldeployments", subresource="status",
                     name="bad") == 1  # fmt: skip
    assert api.count(verb="get", resource="modeldeployments", name="bad") == reads

    api.patch("modeldeployments", "default", "bad", {"spec": {"model": "org/fixed"}})
    await api.until(spec_is_converted("bad"), within_s=20)
    await api.until(lambda a: status_of(a, "bad").get("phase") == "Pending", within_s=20)


async def test_a_restart_mid_way_converges(apiserver: KubeApiServer) -> None:
    api = apiserver
    # First life: the Model is created, then every status write fails until the bridge
    # stops: a crash between the two writes, however many retries fit in before it.
    api.inject(500, verb="patch", resource="modeldeployments", subresource="status", times=10**6)
    async with running_bridge(api):
        api.create("modeldeployments", deployment_body())
        await api.until(spec_is_converted(), within_s=20)
        await api.until(
            lambda a: a.count(verb="patch", resource="modeldeployments", subresource="status") > 0,
            within_s=20,
        )
    assert status_of(api) == {}
    api.clear_faults()
    _hold(api)
    async with running_bridge(api):
        await api.until(lambda a: status_of(a).get("phase") == "Pending", within_s=20)
        api.delete("modeldeployments", "default", "chat")
        await api.until(_model_deleting, within_s=20)
    # Down while the Model's cleanup finishes: the next life releases the ModelDeployment.
    _release(api)
    assert model(api) is None
    assert deployment(api) is not None
    async with running_bridge(api):
        await api.until(lambda a: deployment(a) is None, within_s=20)
    assert api.count(verb="create", resource="models") == 1
