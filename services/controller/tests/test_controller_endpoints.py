"""EndpointPublisher: what proxies are told of a Model's endpoints, and which LoRA adapters
each holds (the adapter loop's part), in order, published only when it changed."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from flexinfer_common.bus import topics
from flexinfer_common.bus.memory import MemoryBus
from flexinfer_common.settings import StoreSettings
from flexinfer_common.store import ModelStore, create_store
from flexinfer_controller.core.endpoints import EndpointPublisher
from flexinfer_controller.runtime import Replica, ReplicaState

KEY = "default/base"


class GatedBus(MemoryBus):
    """A bus whose next publish waits until ``gate`` is set (``held`` says it got there)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate: asyncio.Event | None = None
        self.held = asyncio.Event()

    async def publish(self, topic: str, payload: Mapping[str, Any]) -> str:
        gate, self.gate = self.gate, None
        if gate is not None:
            self.held.set()
            await gate.wait()
        return await super().publish(topic, payload)


class Setup:
    """A publisher on a gated bus, and a probe of what it published."""

    def __init__(self, bus: GatedBus, store: ModelStore) -> None:
        self.bus = bus
        self.publisher = EndpointPublisher(bus, store)
        self.probe = bus.consumer(topics.ENDPOINTS, "probe", "probe")

    async def events(self) -> list[dict[str, Any]]:
        """Every payload published since the last call, in order."""
        out = []
        for message in await self.probe.fetch(timeout_s=0.05):
            await self.probe.ack(message.id)
            out.append(dict(message.payload))
        return out


@pytest.fixture
async def setup(tmp_path: Path) -> AsyncIterator[Setup]:
    bus = GatedBus()
    store = create_store(StoreSettings(url=f"sqlite:///{tmp_path / 'store.db'}"))
    try:
        yield Setup(bus, store)
    finally:
        await bus.close()
        await store.close()


def replica(rid: str) -> Replica:
    return Replica(rid, KEY, 1, ReplicaState.READY, url=f"http://127.0.0.1:{rid}")


def said(payload: dict[str, Any]) -> dict[str, Any]:
    """Replica id -> the adapters its endpoint says it holds ("-": the key is absent)."""
    return {e["replica"]: e.get("adapters", "-") for e in payload["endpoints"]}


async def test_a_new_replica_holds_no_adapter_until_the_adapter_loop_says(setup: Setup) -> None:
    publisher = setup.publisher
    assert await publisher.sync(KEY, [replica("1")], "Ready", adapters=True)
    assert await publisher.held(KEY, {"1": frozenset({"sql"})})
    # Announced for the base model at once, holding nothing yet.
    assert await publisher.sync(KEY, [replica("1"), replica("2")], "Ready", adapters=True)
    assert not await publisher.held(KEY, {"1": frozenset({"sql"}), "2": None})  # unchanged
    assert await publisher.held(KEY, {"1": frozenset({"sql"}), "2": frozenset({"sql"})})
    events = await setup.events()
    assert [said(e) for e in events] == [
        {"1": []},
        {"1": ["sql"]},
        {"1": ["sql"], "2": []},
        {"1": ["sql"], "2": ["sql"]},
    ]
    assert [e["revision"] for e in events] == sorted(e["revision"] for e in events)


async def test_an_unreachable_engine_keeps_what_it_was_known_to_hold(setup: Setup) -> None:
    publisher = setup.publisher
    await publisher.sync(KEY, [replica("1"), replica("2")], "Ready", adapters=True)
    await publisher.held(KEY, {"1": frozenset({"sql"}), "2": frozenset({"sql"})})
    assert not await publisher.held(KEY, {"1": None, "2": frozenset({"sql"})})
    # Unloaded from one: it says so.
    assert await publisher.held(KEY, {"1": frozenset(), "2": None})
    assert said((await setup.events())[-1]) == {"1": [], "2": ["sql"]}


async def test_a_replica_that_left_forgets_what_it_held(setup: Setup) -> None:
    publisher = setup.publisher
    await publisher.sync(KEY, [replica("1")], "Ready", adapters=True)
    await publisher.held(KEY, {"1": frozenset({"sql"})})
    await publisher.sync(KEY, [], "Ready", adapters=True)
    # Back (an engine restarted in place, empty): nothing until the adapter loop looks.
    await publisher.sync(KEY, [replica("1")], "Ready", adapters=True)
    assert said((await setup.events())[-1]) == {"1": []}


async def test_models_whose_engines_take_no_adapters_say_nothing(setup: Setup) -> None:
    publisher = setup.publisher
    await publisher.sync(KEY, [replica("1")], "Ready")
    assert not await publisher.held(KEY, {"1": frozenset({"sql"})})
    (event,) = await setup.events()
    assert said(event) == {"1": "-"}  # no "adapters" key: older proxies read the event
    assert topics.EndpointsEvent.model_validate(event).endpoints[0].adapters is None


async def test_publishes_go_out_one_at_a_time_in_revision_order(setup: Setup) -> None:
    publisher = setup.publisher
    await publisher.sync(KEY, [replica("1")], "Ready", adapters=True)
    await setup.events()
    # The adapter loop's news is held mid-publish by the bus...
    setup.bus.gate = gate = asyncio.Event()
    telling = asyncio.create_task(publisher.held(KEY, {"1": frozenset({"sql"})}))
    await setup.bus.held.wait()
    # ...while the Model loop announces a second replica.
    adding = asyncio.create_task(
        publisher.sync(KEY, [replica("1"), replica("2")], "Ready", adapters=True)
    )
    gate.set()
    assert await telling
    assert await adding
    events = await setup.events()
    # Had the second gone out first, proxies would drop the first as stale and this
    # publisher would believe the older set was their last word.
    revisions = [int(e["revision"]) for e in events]
    assert revisions == sorted(revisions)
    assert [said(e) for e in events] == [{"1": ["sql"]}, {"1": ["sql"], "2": []}]
