"""The admin REST API on Kubernetes for Models: with the Kubernetes store, each call reads or
writes the Model custom resource on the (fake) apiserver, and a delete goes through the
cleanup finalizer: the Model's objects are removed, then the Model is gone."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from flexinfer_common.api import MODEL_FINALIZER
from flexinfer_common.testing.kube_apiserver import KubeApiServer, find_crd_dir
from flexinfer_common.testing.kube_apiserver.fixtures import kube_apiserver_fixture
from flexinfer_controller.runtime.kubernetes.harness import Cluster, model_body, running_cluster
from flexinfer_controller.testing import eventually

apiserver = kube_apiserver_fixture([find_crd_dir(Path(__file__))])


@pytest.fixture
async def cluster(apiserver: KubeApiServer) -> AsyncIterator[Cluster]:
    """A running kubelet and controller (runtime=kubernetes, the Kubernetes store)."""
    async with running_cluster(apiserver) as running:
        yield running


@pytest.fixture
async def client(cluster: Cluster) -> AsyncIterator[httpx.AsyncClient]:
    """A client of the controller's admin API."""
    async with httpx.AsyncClient(base_url=cluster.url, timeout=30) as http:
        yield http


async def test_create_read_and_list_are_the_custom_resources(
    cluster: Cluster, client: httpx.AsyncClient
) -> None:
    api = cluster.api
    created = await client.post("/v1/admin/models", json=model_body(minReplicas=1))
    assert created.status_code == 201, created.text
    stored = cluster.model()
    assert stored is not None
    assert stored["spec"]["backend"] == "reference"
    assert stored["spec"]["serverless"]["minReplicas"] == 1
    assert stored["metadata"]["generation"] == 1
    assert api.count("create", "models") == 1
    await cluster.wait_phase("Ready")
    assert MODEL_FINALIZER in (cluster.model() or {})["metadata"]["finalizers"]
    assert api.get("deployments", "default", "tiny") is not None

    read = (await client.get("/v1/admin/models/tiny")).json()
    assert read["metadata"]["uid"] == (cluster.model() or {})["metadata"]["uid"]
    assert read["status"]["phase"] == "Ready"  # the controller's status write, as stored
    api.create("models", model_body("kubectl"))  # applied around the admin API
    listing = (await client.get("/v1/admin/models")).json()
    assert [m["metadata"]["name"] for m in listing["items"]] == ["kubectl", "tiny"]
    assert (await client.get("/v1/admin/models/absent")).status_code == 404


async def test_a_spec_change_bumps_the_generation_and_keeps_the_finalizer(
    cluster: Cluster, client: httpx.AsyncClient
) -> None:
    doc = model_body()
    assert (await client.put("/v1/admin/models/tiny", json=doc)).status_code == 201
    await cluster.wait_phase("Idle")
    held = cluster.model() or {}
    assert MODEL_FINALIZER in held["metadata"]["finalizers"]

    doc["spec"]["serverless"]["maxReplicas"] = 3
    replaced = await client.put("/v1/admin/models/tiny", json=doc)
    assert replaced.status_code == 200, replaced.text
    assert replaced.json()["metadata"]["generation"] == 2
    stored = cluster.model() or {}
    assert stored["metadata"]["generation"] == 2
    assert stored["spec"]["serverless"]["maxReplicas"] == 3
    # The client's document has no finalizers: the controller's is not the client's to drop.
    assert MODEL_FINALIZER in stored["metadata"]["finalizers"]
    assert stored["metadata"]["uid"] == held["metadata"]["uid"]  # replaced, not recreated
    await cluster.wait_phase("Idle")  # a reconcile of generation 2

    doc["metadata"]["labels"] = {"team": "ml"}
    relabelled = await client.put("/v1/admin/models/tiny", json=doc)
    assert relabelled.json()["metadata"]["generation"] == 2  # metadata is not spec
    assert (cluster.model() or {})["metadata"]["labels"] == {"team": "ml"}


async def test_delete_goes_through_the_finalizer(
    cluster: Cluster, client: httpx.AsyncClient
) -> None:
    api = cluster.api
    assert (await client.post("/v1/admin/models", json=model_body(minReplicas=1))).is_success
    await cluster.wait_phase("Ready")
    assert len(cluster.pods()) == 1

    deleted = await client.delete("/v1/admin/models/tiny")
    assert deleted.status_code == 204, deleted.text
    await eventually(lambda: cluster.model() is None, timeout_s=15)
    assert api.get("deployments", "default", "tiny") is None
    assert api.get("services", "default", "tiny") is None
    assert api.get("configmaps", "default", "flexinfer-endpoints-tiny") is None
    await eventually(lambda: cluster.pods() == [])
    # The delete only stamped the Model; the cleanup ran; removing the finalizer ended it.
    calls = [(c.verb, c.resource, c.name) for c in api.calls if c.subresource is None]
    stamped = calls.index(("delete", "models", "tiny"))
    released = max(i for i, c in enumerate(calls) if c == ("patch", "models", "tiny"))
    assert stamped < calls.index(("delete", "deployments", "tiny")) < released
    assert stamped < calls.index(("delete", "services", "tiny")) < released
    assert (await client.get("/v1/admin/models/tiny")).status_code == 404
    assert (await client.delete("/v1/admin/models/tiny")).status_code == 404
