"""Shared informers: one list and one watch per kind, however many loops follow it (fake
apiserver), on their own and with every loop of the controller running."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from flexinfer_common.kube.client import KubeClient
from flexinfer_common.kube.informer import Change
from flexinfer_common.testing.kube_apiserver import KubeApiServer, find_crd_dir
from flexinfer_common.testing.kube_apiserver.fixtures import kube_apiserver_fixture
from flexinfer_controller.adapters.kube.objects import CustomListWatch
from flexinfer_controller.adapters.kube.resources import MODELS
from flexinfer_controller.adapters.kube.shared import SharedInformer, SharedInformers
from flexinfer_controller.runtime.kubernetes.harness import model_body, running_cluster
from flexinfer_controller.testing import eventually

apiserver = kube_apiserver_fixture([find_crd_dir(Path(__file__))])


@pytest.fixture
async def client(apiserver: KubeApiServer) -> AsyncIterator[KubeClient]:
    """A client of the fake apiserver."""
    made = KubeClient(apiserver.url)
    try:
        yield made
    finally:
        await made.close()


@contextlib.asynccontextmanager
async def subscribed(shared: SharedInformer, seen: list[Change]) -> AsyncIterator[None]:
    """A subscription appending to ``seen`` until the block ends."""
    task = asyncio.create_task(shared.run(seen.append))
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def running(shared: SharedInformer) -> bool:
    """Whether its informer lists and watches now."""
    return shared.running


def keys(seen: list[Change]) -> list[tuple[str, str]]:
    """(type, key) of each change."""
    return [(c.type, c.key) for c in seen]


async def test_two_subscribers_share_one_list_and_watch(
    apiserver: KubeApiServer, client: KubeClient
) -> None:
    apiserver.create("models", model_body("a"))
    informers = SharedInformers()
    # Two loops asking for the same kind, each with its own source object.
    first = informers.informer(CustomListWatch(client, MODELS), "default")
    assert informers.informer(CustomListWatch(client, MODELS), "default") is first
    one: list[Change] = []
    two: list[Change] = []
    async with subscribed(first, one):
        await apiserver.until(lambda a: a.open_watches("models") == 1)
        # The late one gets what was listed before it came, then every change.
        async with subscribed(first, two):
            await eventually(lambda: keys(two) == [("ADDED", "default/a")])
            apiserver.create("models", model_body("b"))
            await eventually(lambda: ("ADDED", "default/b") in keys(two))
            assert keys(one) == [("ADDED", "default/a"), ("ADDED", "default/b")]
        apiserver.create("models", model_body("c"))  # the first one still follows
        await eventually(lambda: ("ADDED", "default/c") in keys(one))
        assert running(first)
    assert not running(first)  # the last one left: nobody follows Models any more
    assert (apiserver.count("list", "models"), apiserver.count("watch", "models")) == (1, 1)
    assert ("ADDED", "default/c") not in keys(two)


async def test_an_other_namespace_is_an_other_informer(client: KubeClient) -> None:
    informers = SharedInformers()
    source = CustomListWatch(client, MODELS)
    assert informers.informer(source, "default") is not informers.informer(source, "ml")


async def test_every_loop_of_the_controller_shares_one_watch_per_kind(
    apiserver: KubeApiServer,
) -> None:
    kinds = ("models", "modelcaches", "modeldeployments", "pods", "nodes")
    async with running_cluster(apiserver) as cluster:
        apiserver.create("models", model_body())
        await cluster.wait_phase("Idle")
        await apiserver.until(lambda a: all(a.open_watches(k) >= 1 for k in kinds))
        # The Model controller, the ModelDeployment bridge and the ModelCache loop all run:
        # Models and ModelCaches, which two of them follow each, are watched once.
        assert {k: apiserver.open_watches(k) for k in kinds} == dict.fromkeys(kinds, 1)
        assert apiserver.count("watch", "models") == 1
        assert apiserver.count("watch", "modelcaches") == 1
