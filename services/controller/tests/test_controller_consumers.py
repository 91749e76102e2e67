"""EventLoop: parsed events to the handler, malformed ones dropped, stale ones reclaimed."""

from __future__ import annotations

import asyncio

from pydantic import BaseModel

from flexinfer_common.bus.memory import MemoryBus
from flexinfer_controller.core.consumers import CONSUMER_GROUP, EventLoop

TOPIC = "flexinfer.test"


class Ping(BaseModel):
    model: str


async def test_events_reach_the_handler_and_the_loop_ends_with_the_bus() -> None:
    bus = MemoryBus()
    received: list[BaseModel] = []
    both = asyncio.Event()

    async def handler(events: list[BaseModel]) -> None:
        received.extend(events)
        if len(received) == 2:
            both.set()

    loop = EventLoop(bus, TOPIC, Ping, handler, name="c1", reclaim_idle_s=30)
    task = asyncio.create_task(loop.run())
    await bus.publish(TOPIC, {"model": "a"})
    await bus.publish(TOPIC, {"nope": 1})  # malformed: dropped and acked
    await bus.publish(TOPIC, {"model": "b"})
    async with asyncio.timeout(5):
        await both.wait()
    assert received == [Ping(model="a"), Ping(model="b")]
    assert await bus.consumer(TOPIC, CONSUMER_GROUP, "c2").reclaim(0) == []
    await bus.close()
    async with asyncio.timeout(5):
        await task


async def test_events_a_dead_replica_fetched_are_reclaimed_handled_and_acked() -> None:
    bus = MemoryBus()
    received: list[BaseModel] = []

    async def handler(events: list[BaseModel]) -> None:
        received.extend(events)

    loop = EventLoop(bus, TOPIC, Ping, handler, name="alive", reclaim_idle_s=0)
    await bus.publish(TOPIC, {"model": "a"})
    dead = bus.consumer(TOPIC, CONSUMER_GROUP, "dead")
    assert len(await dead.fetch()) == 1  # fetched, never acked
    await loop.reclaim()
    assert received == [Ping(model="a")]
    assert await dead.reclaim(0) == []  # acked by the replica that reclaimed it
    await bus.close()
