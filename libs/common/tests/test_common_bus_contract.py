"""The EventBus contract, run against MemoryBus and against RedisBus on a real Redis.

Redis cases are marked ``redis``; they skip when Redis is unreachable, unless CI=true,
where they fail. FLEXINFER_TEST_REDIS_URL picks the server (default db 15).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import AsyncIterator, Callable

import pytest

from flexinfer_common.bus.base import Consumer, EventBus, Message
from flexinfer_common.bus.memory import MemoryBus, parse_id
from flexinfer_common.bus.redis import RedisBus
from flexinfer_common.errors import BusError
from flexinfer_testing.services import REDIS_URL, redis_prefix

TOPIC = "flexinfer.test"

BusFactory = Callable[..., EventBus]


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.redis)])
async def new_bus(request: pytest.FixtureRequest) -> AsyncIterator[BusFactory]:
    """A factory of buses of one kind; every bus it made is closed afterwards."""
    made: list[EventBus] = []
    async with contextlib.AsyncExitStack() as stack:
        if request.param == "redis":
            prefix = await stack.enter_async_context(redis_prefix())

            def factory(retention: int = 10_000) -> EventBus:
                bus = RedisBus.from_url(REDIS_URL, prefix=prefix, retention=retention)
                made.append(bus)
                return bus
        else:

            def factory(retention: int = 10_000) -> EventBus:
                bus = MemoryBus(retention=retention)
                made.append(bus)
                return bus

        try:
            yield factory
        finally:
            for bus in made:
                await bus.close()


@pytest.fixture
def bus(new_bus: BusFactory) -> EventBus:
    """One bus of the parametrized kind."""
    return new_bus()


async def drain(consumer: Consumer, expected: int, timeout_s: float = 3.0) -> list[Message]:
    """Fetch until ``expected`` messages arrived (or fail after ``timeout_s``)."""
    got: list[Message] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < expected and time.monotonic() < deadline:
        got.extend(await consumer.fetch(max_count=expected - len(got), timeout_s=0.2))
    return got


async def test_ids_increase_and_look_like_redis_ids(bus: EventBus) -> None:
    ids = [await bus.publish(TOPIC, {"i": i}) for i in range(20)]
    assert all(re.fullmatch(r"\d+-\d+", i) for i in ids)
    assert [parse_id(i) for i in ids] == sorted(parse_id(i) for i in ids)
    assert len(set(ids)) == 20


async def test_fan_out_to_two_groups(bus: EventBus) -> None:
    first = bus.consumer(TOPIC, "g1", "c")
    second = bus.consumer(TOPIC, "g2", "c")
    await bus.publish(TOPIC, {"n": 1})
    await bus.publish(TOPIC, {"n": 2})
    for consumer in (first, second):
        got = await drain(consumer, 2)
        assert [m.payload for m in got] == [{"n": 1}, {"n": 2}]
        assert all(m.topic == TOPIC and m.deliveries == 1 for m in got)


async def test_work_sharing_within_a_group(bus: EventBus) -> None:
    one = bus.consumer(TOPIC, "workers", "one")
    two = bus.consumer(TOPIC, "workers", "two")
    for i in range(10):
        await bus.publish(TOPIC, {"i": i})
    got_one = await one.fetch(max_count=4, timeout_s=1)
    got_two = await drain(two, 6)
    assert len(got_one) == 4
    assert len(got_two) == 6
    everything = sorted(m.payload["i"] for m in got_one + got_two)
    assert everything == list(range(10))
    assert await one.fetch(timeout_s=0.05) == []


async def test_ack_removes_from_pending(bus: EventBus) -> None:
    worker = bus.consumer(TOPIC, "g", "worker")
    rescuer = bus.consumer(TOPIC, "g", "rescuer")
    await bus.publish(TOPIC, {"n": "acked"})
    await bus.publish(TOPIC, {"n": "forgotten"})
    acked, forgotten = await drain(worker, 2)
    await worker.ack(acked.id)
    reclaimed = await rescuer.reclaim(min_idle_s=0)
    assert [m.payload for m in reclaimed] == [{"n": "forgotten"}]
    assert reclaimed[0].id == forgotten.id
    await rescuer.ack(forgotten.id)
    assert await rescuer.reclaim(min_idle_s=0) == []


async def test_reclaim_after_a_consumer_dies(bus: EventBus) -> None:
    doomed = bus.consumer(TOPIC, "g", "doomed")
    survivor = bus.consumer(TOPIC, "g", "survivor")
    msg_id = await bus.publish(TOPIC, {"job": 7})
    (taken,) = await drain(doomed, 1)
    assert taken.deliveries == 1
    # Not idle long enough yet: the doomed consumer may still be working on it.
    assert await survivor.reclaim(min_idle_s=5) == []
    await asyncio.sleep(0.25)
    (rescued,) = await survivor.reclaim(min_idle_s=0.2)
    assert (rescued.id, rescued.payload, rescued.deliveries) == (msg_id, {"job": 7}, 2)
    # Reclaiming reset the idle time, so it is not handed out again at once.
    assert await doomed.reclaim(min_idle_s=0.2) == []
    await survivor.ack(rescued.id)
    assert await survivor.reclaim(min_idle_s=0) == []


async def test_fetch_times_out_with_nothing(bus: EventBus) -> None:
    consumer = bus.consumer(TOPIC, "g", "c")
    started = time.monotonic()
    assert await consumer.fetch(timeout_s=0.3) == []
    elapsed = time.monotonic() - started
    assert 0.25 <= elapsed < 2.0
    assert await consumer.fetch(timeout_s=0) == []


async def test_fetch_wakes_as_soon_as_a_message_arrives(bus: EventBus) -> None:
    consumer = bus.consumer(TOPIC, "g", "c")
    waiting = asyncio.create_task(consumer.fetch(timeout_s=10))
    await asyncio.sleep(0.05)
    started = time.monotonic()
    await bus.publish(TOPIC, {"wake": True})
    got = await asyncio.wait_for(waiting, 5)
    assert [m.payload for m in got] == [{"wake": True}]
    assert time.monotonic() - started < 1.0


async def test_a_blocked_fetch_does_not_block_other_calls(bus: EventBus) -> None:
    idle = bus.consumer(TOPIC + ".quiet", "g", "idle")
    busy = bus.consumer(TOPIC, "g", "busy")
    blocked = [asyncio.create_task(idle.fetch(timeout_s=3)) for _ in range(3)]
    await asyncio.sleep(0.05)
    started = time.monotonic()
    await bus.publish(TOPIC, {"n": 1})
    (got,) = await drain(busy, 1)
    await busy.ack(got.id)
    assert time.monotonic() - started < 1.0
    await bus.close()
    assert await asyncio.wait_for(asyncio.gather(*blocked), 2) == [[], [], []]


async def test_order_is_preserved(bus: EventBus) -> None:
    consumer = bus.consumer(TOPIC, "g", "c")
    for i in range(50):
        await bus.publish(TOPIC, {"i": i})
    got: list[Message] = []
    while len(got) < 50:
        batch = await consumer.fetch(max_count=7, timeout_s=1)
        assert batch, "messages went missing"
        assert len(batch) <= 7
        got.extend(batch)
    assert [m.payload["i"] for m in got] == list(range(50))


async def test_retention_keeps_the_newest(new_bus: BusFactory) -> None:
    bus = new_bus(retention=10)
    for i in range(300):
        await bus.publish(TOPIC, {"i": i})
    late = bus.consumer(TOPIC, "late", "c", from_start=True)
    kept: list[int] = []
    while batch := await late.fetch(max_count=1000, timeout_s=0.2):
        kept.extend(m.payload["i"] for m in batch)
    assert 10 <= len(kept) < 300
    assert kept == list(range(300 - len(kept), 300))


async def test_concurrent_publishers(bus: EventBus) -> None:
    consumer = bus.consumer(TOPIC, "g", "c")

    async def publisher(p: int) -> list[str]:
        return [await bus.publish(TOPIC, {"p": p, "i": i}) for i in range(20)]

    ids = await asyncio.gather(*(publisher(p) for p in range(5)))
    got = await drain(consumer, 100)
    assert len(got) == 100
    assert len({m.id for m in got}) == 100
    assert {m.id for m in got} == {i for batch in ids for i in batch}
    for p in range(5):
        assert [m.payload["i"] for m in got if m.payload["p"] == p] == list(range(20))


async def test_from_start_semantics(bus: EventBus) -> None:
    await bus.publish(TOPIC, {"n": "a"})
    await bus.publish(TOPIC, {"n": "b"})
    replay = bus.consumer(TOPIC, "replay", "c", from_start=True)
    live = bus.consumer(TOPIC, "live", "c")
    await bus.publish(TOPIC, {"n": "c"})
    assert [m.payload["n"] for m in await drain(replay, 3)] == ["a", "b", "c"]
    assert [m.payload["n"] for m in await drain(live, 1)] == ["c"]
    assert await live.fetch(timeout_s=0.05) == []
    # from_start only applies when the group is created: an existing group keeps its place.
    again = bus.consumer(TOPIC, "live", "other", from_start=True)
    assert await again.fetch(timeout_s=0.1) == []


async def test_close_ends_pending_fetches(bus: EventBus) -> None:
    consumer = bus.consumer(TOPIC, "g", "c")
    waiting = asyncio.create_task(consumer.fetch(timeout_s=30))
    await asyncio.sleep(0.05)
    started = time.monotonic()
    await bus.close()
    assert await asyncio.wait_for(waiting, 2) == []
    assert time.monotonic() - started < 1.0
    assert await consumer.fetch(timeout_s=1) == []
    with pytest.raises(BusError):
        await bus.publish(TOPIC, {"late": True})


async def test_bad_input_is_rejected(bus: EventBus) -> None:
    with pytest.raises(ValueError, match="JSON"):
        await bus.publish(TOPIC, {"x": object()})
    with pytest.raises(ValueError, match="JSON"):
        await bus.publish(TOPIC, {"x": float("nan")})
    with pytest.raises(ValueError, match="invalid bus name"):
        await bus.publish("bad topic", {})
    with pytest.raises(ValueError, match="invalid bus name"):
        bus.consumer(TOPIC, "", "c")
    consumer = bus.consumer(TOPIC, "g", "c")
    await consumer.ack("not-an-id", "also bad")  # ignored, not an error
    with pytest.raises(ValueError, match="max_count"):
        await consumer.fetch(max_count=0)


async def test_payloads_are_copies(bus: EventBus) -> None:
    first = bus.consumer(TOPIC, "g1", "c")
    second = bus.consumer(TOPIC, "g2", "c")
    payload = {"nested": {"list": [1, 2]}}
    await bus.publish(TOPIC, payload)
    payload["nested"]["list"].append(3)
    (a,) = await drain(first, 1)
    a.payload["nested"]["list"].append(4)
    (b,) = await drain(second, 1)
    assert b.payload == {"nested": {"list": [1, 2]}}


async def test_a_live_bus_is_healthy_and_a_closed_one_is_not(bus: EventBus) -> None:
    await bus.ping()
    assert await bus.healthy()
    await bus.close()
    with pytest.raises(BusError, match="closed"):
        await bus.ping()
    assert not await bus.healthy()
