"""Events on Models (adapters/kube/events.py) against the fake apiserver: a repeat within
the series window raises the first Event's count, as client-go's correlator does."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from flexinfer_common.kube.client import KubeClient
from flexinfer_common.testing.kube_apiserver import KubeApiServer, find_crd_dir
from flexinfer_common.testing.kube_apiserver.fixtures import kube_apiserver_fixture
from flexinfer_controller.adapters.kube.events import SERIES_WINDOW_S, KubeEvents
from flexinfer_controller.adapters.kube.store import KubernetesModelStore

apiserver = kube_apiserver_fixture([find_crd_dir(Path(__file__))])


@dataclass
class Clock:
    """The series window's clock, moved by the test."""

    now: float = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Setup:
    api: KubeApiServer
    events: KubeEvents
    clock: Clock

    async def record(self, reason: str, message: str, times: int = 1) -> None:
        """Record the Event ``times`` times and wait until each is written."""
        for _ in range(times):
            self.events.record("default/m", reason, message)
        await self.events.aclose()

    def written(self) -> list[dict[str, Any]]:
        """The Events in namespace default, oldest first."""
        found = self.api.objects("events", "default")
        return sorted(found, key=lambda e: int(e["metadata"]["resourceVersion"]))


@pytest.fixture
async def setup(apiserver: KubeApiServer) -> AsyncIterator[Setup]:
    apiserver.create(
        "models",
        {
            "apiVersion": "ai.flexinfer/v1alpha2",
            "kind": "Model",
            "metadata": {"name": "m", "namespace": "default"},
            "spec": {"backend": "reference", "source": "hf://org/m"},
        },
    )
    client = KubeClient(apiserver.url)
    clock = Clock()
    try:
        yield Setup(
            apiserver, KubeEvents(client, KubernetesModelStore(client), "c-0", clock), clock
        )
    finally:
        await client.close()


async def test_a_repeat_counts_on_the_first_event(setup: Setup) -> None:
    await setup.record("Woken", "engine r1 woken", times=3)
    (event,) = setup.written()
    assert (event["reason"], event["message"], event["count"]) == ("Woken", "engine r1 woken", 3)
    model = setup.api.get("models", "default", "m")
    assert model is not None
    assert event["involvedObject"]["uid"] == model["metadata"]["uid"]
    assert event["lastTimestamp"] >= event["firstTimestamp"]


async def test_another_message_or_reason_is_another_event(setup: Setup) -> None:
    await setup.record("Woken", "engine r1 woken")
    await setup.record("Woken", "engine r2 woken")
    await setup.record("Sleeping", "engine r1 woken")
    assert [e["count"] for e in setup.written()] == [1, 1, 1]


async def test_after_the_window_or_once_the_event_is_gone_a_new_one_starts(setup: Setup) -> None:
    await setup.record("Woken", "engine r1 woken", times=2)
    setup.clock.now += SERIES_WINDOW_S
    await setup.record("Woken", "engine r1 woken")
    assert [e["count"] for e in setup.written()] == [2, 1]
    # Events expire (an hour by default): a repeat of an expired one writes it again.
    newest = setup.written()[-1]["metadata"]["name"]
    setup.api.delete("events", "default", newest)
    await setup.record("Woken", "engine r1 woken", times=2)
    assert [e["count"] for e in setup.written()] == [2, 2]
