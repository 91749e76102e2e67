"""The shared informer over core kinds (fake apiserver): decoded state kept per change, a
``keep`` filter on list and watch alike, and a relist on 410 that decodes only what changed."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from flexinfer_common.kube.client import KubeClient, Obj
from flexinfer_common.kube.informer import Change, Informer
from flexinfer_common.kube.listwatch import CoreListWatch
from flexinfer_common.testing.kube_apiserver import KubeApiServer
from flexinfer_common.testing.kube_apiserver.fixtures import kube_apiserver_fixture

apiserver = kube_apiserver_fixture()


def configmap(name: str, value: str) -> dict[str, Any]:
    """A ConfigMap with one key."""
    return {"metadata": {"name": name}, "data": {"v": value}}


@dataclass
class Running:
    """A ConfigMap informer decoding each object's ``v``, and what it decoded and reported."""

    informer: Informer[str]
    decoded: list[str] = field(default_factory=list)
    changes: list[Change] = field(default_factory=list)


@pytest.fixture
async def running(apiserver: KubeApiServer) -> AsyncIterator[Running]:
    """Following the ConfigMaps named ``keep-*`` in every namespace, synced and watching."""
    apiserver.create("namespaces", {"metadata": {"name": "a"}})
    apiserver.create("configmaps", configmap("keep-1", "one"), "a")
    apiserver.create("configmaps", configmap("other", "x"), "a")
    client = KubeClient(host=apiserver.url)
    decoded: list[str] = []

    def decode(obj: Obj) -> str:
        decoded.append(obj["metadata"]["name"])
        return str(obj["data"]["v"])

    source = CoreListWatch(
        client, "configmaps", keep=lambda obj: obj["metadata"]["name"].startswith("keep-")
    )
    changes: list[Change] = []
    informer = Informer(source, changes.append, decode=decode)
    task = asyncio.create_task(informer.run())
    try:
        await informer.synced.wait()
        await apiserver.until(lambda s: s.open_watches("configmaps") == 1)
        yield Running(informer, decoded, changes)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await client.close()


async def test_the_cache_holds_decoded_state_of_kept_objects(
    apiserver: KubeApiServer, running: Running
) -> None:
    informer = running.informer
    assert informer.keys() == ["a/keep-1"]
    assert informer.get("a/keep-1") == "one"
    apiserver.create("configmaps", configmap("other-2", "y"), "a")
    apiserver.patch("configmaps", "a", "keep-1", {"data": {"v": "uno"}})
    await informer.wait_until(lambda i: i.get("a/keep-1") == "uno")
    assert dict(informer.view()) == {"a/keep-1": "uno"}
    apiserver.delete("configmaps", "a", "other")
    apiserver.delete("configmaps", "a", "keep-1")
    await informer.wait_until(lambda i: not i.keys())
    assert [(c.kind, c.type, c.key) for c in running.changes] == [
        ("ConfigMap", "ADDED", "a/keep-1"),
        ("ConfigMap", "MODIFIED", "a/keep-1"),
        ("ConfigMap", "DELETED", "a/keep-1"),
    ]
    assert running.decoded == ["keep-1", "keep-1"]


async def test_a_relist_decodes_only_what_changed_in_the_gap(
    apiserver: KubeApiServer, running: Running
) -> None:
    apiserver.create("configmaps", configmap("keep-2", "two"), "a")
    await running.informer.wait_until(lambda i: i.get("a/keep-2") == "two")

    def gap() -> None:
        apiserver.patch("configmaps", "a", "keep-2", {"data": {"v": "dos"}})
        apiserver.create("configmaps", configmap("keep-3", "three"), "a")
        apiserver.compact()

    apiserver.after(gap, verb="watch", resource="configmaps")
    apiserver.drop_watches()
    await running.informer.wait_until(lambda i: i.lists == 2)
    assert dict(running.informer.view()) == {
        "a/keep-1": "one",
        "a/keep-2": "dos",
        "a/keep-3": "three",
    }
    # keep-1 did not change: the relist compared versions and left its state alone.
    assert running.decoded == ["keep-1", "keep-2", "keep-2", "keep-3"]


def test_an_unknown_core_kind_is_refused(apiserver: KubeApiServer) -> None:
    with pytest.raises(ValueError, match="no core kind 'secretz'"):
        CoreListWatch(KubeClient(host=apiserver.url), "secretz")
