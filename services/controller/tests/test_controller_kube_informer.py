"""The Kubernetes informer: list, watch, resume, relist on 410, bookmarks (fake apiserver)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from flexinfer_common.kube.informer import Change, Informer
from flexinfer_common.testing.kube_apiserver import KubeApiServer, find_crd_dir
from flexinfer_common.testing.kube_apiserver.fixtures import kube_apiserver_fixture
from flexinfer_controller.adapters.kube.store import KubernetesModelStore

apiserver = kube_apiserver_fixture([find_crd_dir(Path(__file__))])


def model(name: str, backend: str = "vllm") -> dict[str, Any]:
    """A Model body as kubectl would apply it."""
    return {
        "apiVersion": "ai.flexinfer/v1alpha2",
        "kind": "Model",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"backend": backend, "source": "hf://org/m"},
    }


@dataclass
class Running:
    """An informer running in a task, and the changes it reported."""

    informer: Informer[dict[str, Any]]
    changes: list[Change] = field(default_factory=list)

    def seen(self) -> list[tuple[str, str]]:
        """(type, key) of every change, in order."""
        return [(c.type, c.key) for c in self.changes]

    async def until(self, count: int) -> None:
        """Wait for ``count`` changes in all."""
        await self.informer.wait_until(lambda _: len(self.changes) >= count)


@pytest.fixture
async def running(apiserver: KubeApiServer) -> AsyncIterator[Running]:
    """An informer of Models, synced and watching."""
    store = KubernetesModelStore.connect(apiserver.url)
    changes: list[Change] = []
    informer = store.model_informer(changes.append)
    task = asyncio.create_task(informer.run())
    try:
        await informer.synced.wait()
        await apiserver.until(lambda s: s.open_watches("models") == 1)
        yield Running(informer, changes)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await store.close()


async def test_list_then_watch_reports_every_change(apiserver: KubeApiServer) -> None:
    apiserver.create("models", model("before"))
    store = KubernetesModelStore.connect(apiserver.url)
    changes: list[Change] = []
    informer = store.model_informer(changes.append)
    task = asyncio.create_task(informer.run())
    try:
        await informer.synced.wait()
        assert [(c.type, c.key) for c in changes] == [("ADDED", "default/before")]
        apiserver.create("models", model("a"))
        apiserver.patch("models", "default", "a", {"spec": {"backend": "llamacpp"}})
        apiserver.delete("models", "default", "before")
        await informer.wait_until(lambda _: len(changes) == 4)
        assert [(c.type, c.key) for c in changes[1:]] == [
            ("ADDED", "default/a"),
            ("MODIFIED", "default/a"),
            ("DELETED", "default/before"),
        ]
        assert changes[-1].resource_version == str(apiserver.resource_version)
        assert informer.keys() == ["default/a"]
        a = informer.get("default/a")
        assert a is not None
        assert a["spec"]["backend"] == "llamacpp"
        assert (informer.lists, informer.watches) == (1, 1)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await store.close()


@pytest.mark.parametrize("abrupt", [False, True], ids=["ended", "cut"])
async def test_dropped_stream_resumes_without_a_relist(
    apiserver: KubeApiServer, running: Running, abrupt: bool
) -> None:
    apiserver.create("models", model("a"))
    await running.until(1)
    # Made while no watch is open: the resumed watch replays it from the history.
    apiserver.after(lambda: apiserver.create("models", model("b")), verb="watch", resource="models")
    apiserver.drop_watches(abrupt=abrupt)
    await running.until(2)
    apiserver.create("models", model("c"))
    await running.until(3)
    assert running.seen() == [("ADDED", f"default/{n}") for n in "abc"]
    assert running.informer.lists == 1
    assert running.informer.watches == 2


async def test_watch_error_is_retried_from_the_same_version(
    apiserver: KubeApiServer, running: Running
) -> None:
    apiserver.inject(500, verb="watch", resource="models")
    apiserver.after(lambda: apiserver.create("models", model("a")), verb="watch", resource="models")
    apiserver.drop_watches()
    await running.until(1)
    assert running.seen() == [("ADDED", "default/a")]
    assert running.informer.lists == 1
    assert apiserver.count(verb="watch", resource="models") == 3


async def test_410_relists_and_reports_the_gap_once(
    apiserver: KubeApiServer, running: Running
) -> None:
    for name in ("a", "b", "same"):
        apiserver.create("models", model(name))
    await running.until(3)

    def gap() -> None:
        """Changes the informer misses, then a compaction that expires its resourceVersion."""
        apiserver.patch("models", "default", "a", {"spec": {"backend": "llamacpp"}})
        apiserver.delete("models", "default", "b")
        apiserver.create("models", model("c"))
        apiserver.compact()

    apiserver.after(gap, verb="watch", resource="models")
    apiserver.drop_watches()
    await running.until(6)
    assert running.seen()[3:] == [
        ("DELETED", "default/b"),
        ("MODIFIED", "default/a"),
        ("ADDED", "default/c"),
    ]
    assert running.informer.lists == 2
    apiserver.create("models", model("d"))
    await running.until(7)
    assert running.seen()[6:] == [("ADDED", "default/d")]  # nothing reported twice
    assert running.informer.keys() == ["default/a", "default/c", "default/d", "default/same"]


async def test_forced_410_by_a_short_history(apiserver: KubeApiServer, running: Running) -> None:
    """A history window shorter than the gap expires the watch just as a compaction does."""
    apiserver.create("models", model("a"))
    await running.until(1)
    apiserver.set_history_limit(2)

    def gap() -> None:
        for i in range(4):
            apiserver.create("configmaps", {"metadata": {"name": f"cm{i}"}}, "default")

    apiserver.after(gap, verb="watch", resource="models")
    apiserver.drop_watches()
    await running.informer.wait_until(lambda i: i.lists == 2)
    assert running.seen() == [("ADDED", "default/a")]  # the relist found nothing new


async def test_bookmarks_advance_the_version_a_resume_starts_from(
    apiserver: KubeApiServer, running: Running
) -> None:
    # Other kinds move the resourceVersion on; Model watches see no event for it.
    for i in range(3):
        apiserver.create("configmaps", {"metadata": {"name": f"cm{i}"}}, "default")
    apiserver.bookmark()
    server_rv = str(apiserver.resource_version)
    await running.informer.wait_until(lambda i: i.bookmarks == 1)
    assert running.informer.resource_version == server_rv
    assert running.changes == []
    # Only a watch from the bookmark's version survives forgetting the history up to now.
    apiserver.compact()
    apiserver.after(lambda: apiserver.create("models", model("a")), verb="watch", resource="models")
    apiserver.drop_watches()
    await running.until(1)
    assert running.seen() == [("ADDED", "default/a")]
    assert running.informer.lists == 1
