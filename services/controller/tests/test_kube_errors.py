"""The apiserver's errors at the kubernetes runtime's boundary, and what the reconcile makes of
them: a refused object fails the Model until its spec changes, a temporary error is retried
after its delay, each told in status. Against the shared fake apiserver, which answers the
injected errors with the real apiserver's Status bodies.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from flexinfer_common.errors import (
    ConflictError,
    InvalidSpecError,
    PermanentError,
    StoreError,
    TemporaryError,
)
from flexinfer_common.kube.client import RETRY_S, KubeClient
from flexinfer_common.testing.kube_apiserver import KubeApiServer, find_crd_dir
from flexinfer_common.testing.kube_apiserver.fixtures import kube_apiserver_fixture
from flexinfer_controller.adapters.kube.workloads import Workloads
from flexinfer_controller.runtime.kubernetes.errors import CONFLICT_DELAY_S, cluster_errors
from flexinfer_controller.runtime.kubernetes.harness import Cluster, model_body, running_cluster
from flexinfer_controller.testing import eventually

apiserver = kube_apiserver_fixture([find_crd_dir(Path(__file__))])
DEPLOYMENTS = ("apps", "deployments", "default")
REFUSAL = 'Deployment.apps "tiny" is invalid: spec.template.spec.containers[0].image: Required'


@pytest.fixture
async def cluster(apiserver: KubeApiServer) -> AsyncIterator[Cluster]:
    """A running kubelet and controller on the fake apiserver."""
    async with running_cluster(apiserver) as running:
        yield running


def conditions(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in status.get("conditions") or []}


async def reconciles(url: str) -> float:
    """The controller's count of reconciles that returned (result ok)."""
    async with httpx.AsyncClient() as client:
        text = (await client.get(f"{url}/metrics")).text
    for line in text.splitlines():
        if line.startswith('flexinfer_controller_reconciles_total{result="ok"}'):
            return float(line.split()[-1])
    return 0.0


async def create_deployment(api: KubeApiServer) -> None:
    """One create of a Deployment through the real client, its errors mapped as the runtime's."""
    client = KubeClient(host=api.url)
    body = {"metadata": {"name": "x"}, "spec": {"selector": {}, "template": {}}}
    try:
        with cluster_errors("ensuring the Model's objects"):
            await Workloads(client).execute("create", DEPLOYMENTS, None, body)
    finally:
        await client.close()


@pytest.mark.parametrize(("code", "reason"), [(422, "Invalid"), (400, "BadRequest")])
async def test_a_refused_object_is_a_permanent_error(
    apiserver: KubeApiServer, code: int, reason: str
) -> None:
    apiserver.inject(code, verb="create", resource="deployments", message=REFUSAL)
    with pytest.raises(PermanentError) as raised:
        await create_deployment(apiserver)
    assert raised.value.status_reason == reason
    assert REFUSAL in str(raised.value)
    assert isinstance(raised.value.__cause__, InvalidSpecError)


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        (409, "Conflict"),
        (429, "TooManyRequests"),
        (500, "InternalError"),
        (503, "ServiceUnavailable"),
    ],
)
async def test_conflicts_throttling_and_server_errors_are_temporary(
    apiserver: KubeApiServer, code: int, reason: str
) -> None:
    apiserver.inject(code, verb="create", resource="deployments")
    with pytest.raises(TemporaryError) as raised:
        await create_deployment(apiserver)
    assert raised.value.status_reason == reason
    if code == 409:  # the client's ConflictError, made temporary at the runtime's boundary
        assert raised.value.delay == CONFLICT_DELAY_S
        assert isinstance(raised.value.__cause__, ConflictError)
    else:  # the client's StoreError, temporary as it is
        assert isinstance(raised.value, StoreError)
        assert raised.value.delay == RETRY_S
        assert raised.value.__cause__ is not None


async def test_an_unreachable_apiserver_is_temporary(apiserver: KubeApiServer) -> None:
    url = apiserver.url
    apiserver.stop()
    client = KubeClient(host=url)
    try:
        with pytest.raises(TemporaryError) as raised:
            await Workloads(client).get(DEPLOYMENTS, "x")
    finally:
        await client.close()
    assert (raised.value.status_reason, raised.value.delay) == ("ApiServerUnreachable", RETRY_S)
    assert raised.value.__cause__ is not None


async def test_a_refused_deployment_fails_the_model_until_its_spec_changes(
    cluster: Cluster,
) -> None:
    api = cluster.api
    api.inject(422, verb="create", resource="deployments", times=1000, message=REFUSAL)
    api.create("models", model_body())
    await cluster.wait_phase("Failed")
    status = cluster.status()
    failed = conditions(status)["Reconciled"]
    assert (failed["status"], failed["reason"]) == ("False", "Invalid")
    assert REFUSAL in failed["message"]
    assert "422" in failed["message"]
    assert failed["observedGeneration"] == cluster.model()["metadata"]["generation"]  # type: ignore[index]
    assert status["message"] == failed["message"]
    assert api.get("deployments", "default", "tiny") is None

    # Not retried: another event of the Model (no spec change) reconciles it, sending nothing.
    creates = api.count("create", "deployments")
    done = await reconciles(cluster.url)
    api.patch("models", "default", "tiny", {"metadata": {"labels": {"team": "a"}}})
    await eventually(lambda: _more(cluster.url, done))
    assert api.count("create", "deployments") == creates
    assert cluster.status()["phase"] == "Failed"

    # A new spec is tried at once, and the failure leaves status with it.
    api.clear_faults()
    api.patch("models", "default", "tiny", {"spec": {"serverless": {"idleTimeout": "600s"}}})
    await cluster.wait_phase("Idle")
    assert "Reconciled" not in conditions(cluster.status())
    assert api.get("deployments", "default", "tiny") is not None


async def _more(url: str, than: float) -> bool:
    return await reconciles(url) > than


async def test_an_unavailable_apiserver_is_retried_after_its_delay_and_told(
    cluster: Cluster,
) -> None:
    api = cluster.api
    api.inject(503, verb="create", resource="deployments")
    started = asyncio.get_running_loop().time()
    api.create("models", model_body())
    await eventually(lambda: "Reconciled" in conditions(cluster.status()))
    told = conditions(cluster.status())["Reconciled"]
    assert (told["status"], told["reason"]) == ("False", "ServiceUnavailable")
    assert f"retrying in {RETRY_S:.1f}s" in told["message"]
    assert "create deployments: 503" in told["message"]

    await cluster.wait_phase("Idle")
    # Retried once, after the apiserver's delay: the status write's echo did not retry it.
    assert asyncio.get_running_loop().time() - started >= RETRY_S
    assert api.count("create", "deployments") == 2
    assert "Reconciled" not in conditions(cluster.status())
