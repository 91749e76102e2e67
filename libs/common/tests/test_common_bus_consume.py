"""consume(): the fetch-handle-ack loop, on the real MemoryBus."""

from __future__ import annotations

import asyncio

from flexinfer_common.bus import Message, consume
from flexinfer_common.bus.memory import MemoryBus
from flexinfer_common.errors import PermanentError, TemporaryError

TOPIC = "flexinfer.test"


async def test_batches_are_handled_then_acked_and_the_loop_ends_with_the_bus() -> None:
    bus = MemoryBus()
    consumer = bus.consumer(TOPIC, "group", "one")
    seen: list[dict[str, object]] = []
    both = asyncio.Event()

    async def handle(messages: list[Message]) -> None:
        seen.extend(m.payload for m in messages)
        if len(seen) == 2:
            both.set()

    loop = asyncio.create_task(consume(bus, consumer, handle, topic=TOPIC))
    await bus.publish(TOPIC, {"n": 1})
    await bus.publish(TOPIC, {"n": 2})
    async with asyncio.timeout(5):
        await both.wait()
    assert seen == [{"n": 1}, {"n": 2}]
    assert await consumer.reclaim(0) == []  # both acked
    await bus.close()
    async with asyncio.timeout(5):
        await loop  # returns, rather than spinning on a bus that answers at once


async def test_a_batch_that_failed_for_a_while_is_handled_again_not_skipped() -> None:
    bus = MemoryBus()
    consumer = bus.consumer(TOPIC, "group", "one")
    handled: list[object] = []
    attempts = 0
    both = asyncio.Event()

    async def handle(messages: list[Message]) -> None:
        nonlocal attempts
        if messages[0].payload["n"] == 1:
            attempts += 1
            if attempts < 3:
                raise TemporaryError("store down")
        handled.extend(m.payload["n"] for m in messages)
        if len(handled) == 2:
            both.set()

    await bus.publish(TOPIC, {"n": 1})
    loop = asyncio.create_task(consume(bus, consumer, handle, topic=TOPIC, retry_s=0.01))
    await bus.publish(TOPIC, {"n": 2})
    async with asyncio.timeout(5):
        await both.wait()
    # The first batch (only n=1, or n=1 and n=2) came back until the store answered.
    assert handled[0] == 1
    assert set(handled) == {1, 2}
    assert attempts == 3
    assert await consumer.reclaim(0) == []  # everything acked
    await bus.close()
    async with asyncio.timeout(5):
        await loop


async def test_a_batch_that_cannot_be_handled_is_left_for_reclaim() -> None:
    bus = MemoryBus()
    consumer = bus.consumer(TOPIC, "group", "one")
    handled: list[object] = []
    failed, second = asyncio.Event(), asyncio.Event()

    async def handle(messages: list[Message]) -> None:
        if messages[0].payload["n"] == 1:
            failed.set()
            raise PermanentError("this one will never work")
        handled.extend(m.payload["n"] for m in messages)
        second.set()

    loop = asyncio.create_task(consume(bus, consumer, handle, topic=TOPIC, retry_s=0.01))
    await bus.publish(TOPIC, {"n": 1})
    async with asyncio.timeout(5):
        await failed.wait()
    await bus.publish(TOPIC, {"n": 2})
    async with asyncio.timeout(5):
        await second.wait()
    assert handled == [2]
    assert [m.payload for m in await consumer.reclaim(0)] == [{"n": 1}]  # left for reclaim
    await bus.close()
    async with asyncio.timeout(5):
        await loop
