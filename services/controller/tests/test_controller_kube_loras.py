"""LoRAAdapters on Kubernetes, against the shared fake apiserver: adapters applied as kubectl
would reach the controller through its informers only (status through the subresource,
changes on the bus), and the admin API reads and writes the custom resources."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from flexinfer_common.bus import Consumer, topics
from flexinfer_common.bus.memory import MemoryBus
from flexinfer_common.testing.kube_apiserver import KubeApiServer, find_crd_dir
from flexinfer_common.testing.kube_apiserver.fixtures import kube_apiserver_fixture
from flexinfer_controller.runtime.kubernetes.harness import controller

apiserver = kube_apiserver_fixture([find_crd_dir(Path(__file__))])
Seen = tuple[str, str, int, bool]


@dataclass
class Cluster:
    """The fake apiserver, the controller app on it, and a consumer of adapter events."""

    api: KubeApiServer
    client: httpx.AsyncClient
    probe: Consumer
    events: list[Seen]

    def adapter(self, name: str = "sql") -> dict[str, Any] | None:
        """The stored LoRAAdapter, as kubectl would get it."""
        return self.api.get("loraadapters", "default", name)

    async def loaded_condition(self, generation: int, name: str = "sql") -> dict[str, Any]:
        """The Loaded condition once it observed ``generation``."""

        def written(api: KubeApiServer) -> bool:
            return _loaded(api.get("loraadapters", "default", name), generation) is not None

        await self.api.until(written, within_s=20)
        found = _loaded(self.adapter(name), generation)
        assert found is not None
        return found

    async def until_events(self, count: int) -> list[Seen]:
        """The adapter events so far, once there are at least ``count``."""
        for _ in range(40):  # each fetch waits up to its timeout for a message
            if len(self.events) >= count:
                break
            for message in await self.probe.fetch(timeout_s=0.5):
                e = topics.AdapterChangedEvent.model_validate(message.payload)
                self.events.append((e.adapter, e.model, e.generation, e.deleted))
        assert len(self.events) >= count, self.events
        return self.events


def _loaded(found: dict[str, Any] | None, generation: int) -> dict[str, Any] | None:
    conditions = ((found or {}).get("status") or {}).get("conditions") or []
    return next(
        (c for c in conditions if c["type"] == "Loaded" and c["observedGeneration"] == generation),
        None,
    )


def adapter_body(name: str = "sql", **spec: Any) -> dict[str, Any]:
    """A LoRAAdapter on the ``llama`` Model, as kubectl would apply it."""
    body = {
        "modelRef": "llama",
        "adapterName": f"{name}-lora",
        "source": {"type": "HuggingFace", "uri": f"org/{name}-lora"},
        **spec,
    }
    return {
        "apiVersion": "ai.flexinfer/v1alpha2",
        "kind": "LoRAAdapter",
        "metadata": {"name": name, "namespace": "default"},
        "spec": body,
    }


@pytest.fixture
async def cluster(apiserver: KubeApiServer) -> AsyncIterator[Cluster]:
    """The controller app with runtime=kubernetes (create_app's wiring) on the apiserver."""
    bus = MemoryBus()
    probe = bus.consumer(topics.ADAPTERS, "kube-lora-test", "t")
    try:
        async with controller(apiserver, bus) as url, httpx.AsyncClient(base_url=url) as client:
            yield Cluster(apiserver, client, probe, [])
    finally:
        await bus.close()


def status_patches(api: KubeApiServer) -> tuple[int, int]:
    """(status subresource patches, main resource patches) of loraadapters."""
    status = api.count(verb="patch", resource="loraadapters", subresource="status")
    return status, api.count(verb="patch", resource="loraadapters", subresource=None)


async def test_applied_adapter_edited_and_deleted_reaches_the_controller(
    cluster: Cluster,
) -> None:
    api = cluster.api
    api.create("loraadapters", adapter_body())
    condition = await cluster.loaded_condition(1)
    # The adapter loop's pass: no Model "llama" exists, so nothing is loaded, nor held.
    assert (condition["status"], condition["reason"]) == ("False", "ModelNotFound")
    assert (cluster.adapter() or {})["status"]["phase"] == "Pending"
    assert await cluster.until_events(1) == [("default/sql", "default/llama", 1, False)]
    assert status_patches(api) == (1, 0)

    api.patch("loraadapters", "default", "sql", {"spec": {"maxRank": 16}})
    await cluster.loaded_condition(2)
    assert (await cluster.until_events(2))[1:] == [("default/sql", "default/llama", 2, False)]
    assert status_patches(api) == (2, 0)

    api.delete("loraadapters", "default", "sql")
    assert (await cluster.until_events(3))[2:] == [("default/sql", "default/llama", 0, True)]
    assert status_patches(api) == (2, 0)  # the status write's own echo wrote nothing


async def test_410_relists_and_the_gap_reaches_the_controller(cluster: Cluster) -> None:
    api = cluster.api
    api.create("loraadapters", adapter_body("a"))
    api.create("loraadapters", adapter_body("b"))
    await cluster.loaded_condition(1, "a")
    await cluster.loaded_condition(1, "b")
    await cluster.until_events(2)

    def gap() -> None:
        """Changes the informer misses, then a compaction that expires its resourceVersion."""
        api.patch("loraadapters", "default", "a", {"spec": {"maxRank": 8}})
        api.delete("loraadapters", "default", "b")
        api.compact()

    api.after(gap, verb="watch", resource="loraadapters")
    api.drop_watches()
    await cluster.loaded_condition(2, "a")
    events = await cluster.until_events(4)
    assert sorted(events[2:]) == [
        ("default/a", "default/llama", 2, False),
        ("default/b", "default/llama", 0, True),
    ]
    # (Lists are not counted: every pass of the adapter loop lists its namespace's adapters.)


async def test_admin_api_reads_and_writes_the_custom_resources(cluster: Cluster) -> None:
    api, client = cluster.api, cluster.client
    doc = adapter_body()
    created = await client.post("/v1/admin/loraadapters", json=doc)
    assert created.status_code == 201, created.text
    stored = cluster.adapter()
    assert stored is not None
    assert stored["spec"]["adapterName"] == "sql-lora"
    assert stored["status"]["phase"] == "Pending"  # written through the subresource
    # The informer may write the same status too, before the admin API's own write lands.
    status, main = status_patches(api)
    assert status >= 1
    assert main == 0

    # One kubectl-applied, one admin-created: the list is the apiserver's.
    api.create("loraadapters", adapter_body("kubectl"))
    await cluster.loaded_condition(1, "kubectl")
    listing = (await client.get("/v1/admin/loraadapters")).json()
    assert [a["metadata"]["name"] for a in listing["items"]] == ["kubectl", "sql"]

    doc["spec"]["maxRank"] = 16
    replaced = await client.put("/v1/admin/loraadapters/sql", json=doc)
    assert replaced.status_code == 200, replaced.text
    assert replaced.json()["metadata"]["generation"] == 2
    assert (cluster.adapter() or {})["spec"]["maxRank"] == 16
    await cluster.loaded_condition(2)

    assert (await client.delete("/v1/admin/loraadapters/sql")).status_code == 204
    assert cluster.adapter() is None
    assert (await client.get("/v1/admin/loraadapters/sql")).status_code == 404
    # Every change is published, whichever of the admin API and the informer saw it first.
    events = await cluster.until_events(4)
    assert sorted({e for e in events if e[0] == "default/sql"}) == [
        ("default/sql", "default/llama", 0, True),
        ("default/sql", "default/llama", 1, False),
        ("default/sql", "default/llama", 2, False),
    ]
