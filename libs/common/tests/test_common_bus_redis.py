"""RedisBus beyond the shared contract: several processes, malformed entries, outages.

Every test needs the real Redis (marked ``redis``); unreachable means skip, or fail with
CI=true. A TCP proxy in front of Redis stands in for the network so a test can cut it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from redis.asyncio import Redis
from redis.exceptions import RedisError
from sqlalchemy.engine import make_url

from flexinfer_common.bus import create_bus
from flexinfer_common.bus.base import Consumer, Message
from flexinfer_common.bus.redis import PAYLOAD_FIELD, RedisBus
from flexinfer_common.errors import BusError
from flexinfer_common.settings import BusSettings
from flexinfer_testing.services import REDIS_URL, redis_prefix, unavailable

pytestmark = pytest.mark.redis

TOPIC = "flexinfer.test"


@pytest.fixture
async def admin() -> AsyncIterator[Redis]:
    """A plain client of the test Redis, for writing raw entries and inspecting state."""
    client = Redis.from_url(REDIS_URL, socket_connect_timeout=2, decode_responses=True)
    try:
        await client.ping()
    except (RedisError, OSError) as exc:
        await client.aclose()
        unavailable(f"Redis at {REDIS_URL}", exc)
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture
async def prefix() -> AsyncIterator[str]:
    """A unique key prefix; every key under it is deleted afterwards."""
    async with redis_prefix() as value:
        yield value


@contextlib.asynccontextmanager
async def bus_at(url: str, prefix: str) -> AsyncIterator[RedisBus]:
    """A RedisBus that is closed on exit."""
    bus = RedisBus.from_url(url, prefix=prefix, retention=1000)
    try:
        yield bus
    finally:
        await bus.close()


async def drain(consumer: Consumer, expected: int, timeout_s: float = 3.0) -> list[Message]:
    """Fetch until ``expected`` messages arrived or ``timeout_s`` passed."""
    got: list[Message] = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while len(got) < expected and loop.time() < deadline:
        got.extend(await consumer.fetch(max_count=expected - len(got), timeout_s=0.2))
    return got


async def test_two_buses_share_a_stream(prefix: str) -> None:
    async with bus_at(REDIS_URL, prefix) as one, bus_at(REDIS_URL, prefix) as two:
        workers = [one.consumer(TOPIC, "workers", "a"), two.consumer(TOPIC, "workers", "b")]
        watcher = two.consumer(TOPIC, "watch", "w")
        # Make sure the groups exist before the other bus publishes.
        await workers[0].fetch(timeout_s=0)
        await workers[1].fetch(timeout_s=0)
        await watcher.fetch(timeout_s=0)
        for i in range(20):
            await one.publish(TOPIC, {"i": i})
        first = await workers[0].fetch(max_count=8, timeout_s=1)
        rest = await drain(workers[1], 12)
        assert sorted(m.payload["i"] for m in first + rest) == list(range(20))
        assert len(first) == 8
        assert [m.payload["i"] for m in await drain(watcher, 20)] == list(range(20))


async def test_another_process_reclaims_work_of_a_dead_one(prefix: str) -> None:
    async with bus_at(REDIS_URL, prefix) as survivor_bus:
        survivor = survivor_bus.consumer(TOPIC, "g", "survivor")
        await survivor.fetch(timeout_s=0)
        async with bus_at(REDIS_URL, prefix) as doomed_bus:
            doomed = doomed_bus.consumer(TOPIC, "g", "doomed")
            msg_id = await survivor_bus.publish(TOPIC, {"job": 1})
            assert [m.id for m in await drain(doomed, 1)] == [msg_id]
        # The doomed process is gone without acking.
        await asyncio.sleep(0.15)
        (rescued,) = await survivor.reclaim(min_idle_s=0.1)
        assert (rescued.id, rescued.payload, rescued.deliveries) == (msg_id, {"job": 1}, 2)
        await survivor.ack(rescued.id)
        assert await survivor.reclaim(min_idle_s=0) == []


async def test_malformed_entries_are_skipped_and_acked(
    prefix: str, admin: Redis, caplog: pytest.LogCaptureFixture
) -> None:
    async with bus_at(REDIS_URL, prefix) as bus:
        consumer = bus.consumer(TOPIC, "g", "c")
        await consumer.fetch(timeout_s=0)
        key = bus.key(TOPIC)
        await admin.xadd(key, {PAYLOAD_FIELD: "not json"})
        await admin.xadd(key, {PAYLOAD_FIELD: "[1, 2]"})
        await admin.xadd(key, {"other": "field"})
        raw = Redis.from_url(REDIS_URL)
        try:
            await raw.xadd(key, {PAYLOAD_FIELD: b"\xff\xfe{"})
        finally:
            await raw.aclose()
        good = await bus.publish(TOPIC, {"ok": True})
        with caplog.at_level(logging.WARNING, logger="flexinfer_common.bus.redis_consumer"):
            got = await drain(consumer, 1)
        assert [(m.id, m.payload) for m in got] == [(good, {"ok": True})]
        assert len([r for r in caplog.records if "malformed" in r.getMessage()]) == 4
        pending = await admin.xpending(key, "g")
        assert pending["pending"] == 1  # only the good one, which we have not acked yet
        await consumer.ack(good)
        assert (await admin.xpending(key, "g"))["pending"] == 0


async def test_malformed_pending_entries_are_dropped_on_reclaim(prefix: str, admin: Redis) -> None:
    async with bus_at(REDIS_URL, prefix) as bus:
        consumer = bus.consumer(TOPIC, "g", "c")
        await consumer.fetch(timeout_s=0)
        key = bus.key(TOPIC)
        await admin.xadd(key, {PAYLOAD_FIELD: "{broken"})
        # Another client reads it raw and dies, leaving it pending.
        await admin.xreadgroup("g", "raw", {key: ">"}, count=10)
        assert await consumer.reclaim(min_idle_s=0) == []
        assert (await admin.xpending(key, "g"))["pending"] == 0


async def test_create_bus_builds_a_redis_bus(prefix: str) -> None:
    settings = BusSettings(url=REDIS_URL, stream_prefix=prefix, retention=100)
    bus = create_bus(settings)
    try:
        assert isinstance(bus, RedisBus)
        consumer = bus.consumer(TOPIC, "g", "c")
        await bus.publish(TOPIC, {"hello": "world"})
        assert [m.payload for m in await drain(consumer, 1)] == [{"hello": "world"}]
    finally:
        await bus.close()


class TcpProxy:
    """Forwards 127.0.0.1:<port> to Redis; ``stop`` cuts every connection."""

    def __init__(self, host: str, port: int) -> None:
        self._target = (host, port)
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._pipes: set[asyncio.Task[None]] = set()
        self.port = 0

    async def start(self) -> None:
        """Listen (again, on the same port after a stop)."""
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        """Stop listening and close every forwarded connection."""
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.close()
        for task in list(self._pipes):
            task.cancel()
        await asyncio.gather(*self._pipes, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self._target)
        self._writers.update((writer, up_writer))
        pipes = [
            asyncio.ensure_future(self._pipe(reader, up_writer)),
            asyncio.ensure_future(self._pipe(up_reader, writer)),
        ]
        self._pipes.update(pipes)
        await asyncio.gather(*pipes, return_exceptions=True)
        for w in (writer, up_writer):
            w.close()
            self._writers.discard(w)
        self._pipes.difference_update(pipes)

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        writer.close()


@asynccontextmanager
async def proxied_redis() -> AsyncIterator[tuple[TcpProxy, str]]:
    """A TcpProxy in front of the test Redis, and the URL that reaches Redis through it."""
    target = make_url(REDIS_URL)
    proxy = TcpProxy(target.host or "127.0.0.1", target.port or 6379)
    await proxy.start()
    try:
        yield proxy, f"redis://127.0.0.1:{proxy.port}/{target.database or 0}"
    finally:
        await proxy.stop()


async def test_connection_loss_is_a_bus_error_and_recovers(prefix: str) -> None:
    async with proxied_redis() as (proxy, url), bus_at(url, prefix) as bus:
        consumer = bus.consumer(TOPIC, "g", "c")
        await bus.publish(TOPIC, {"n": 1})
        assert [m.payload for m in await drain(consumer, 1)] == [{"n": 1}]
        await proxy.stop()
        with pytest.raises(BusError, match="unreachable"):
            await bus.publish(TOPIC, {"n": 2})
        with pytest.raises(BusError):
            await consumer.fetch(timeout_s=0.2)
        with pytest.raises(BusError):
            await consumer.reclaim(min_idle_s=0)
        await proxy.start()
        await bus.publish(TOPIC, {"n": 3})
        assert [m.payload for m in await drain(consumer, 1)] == [{"n": 3}]


async def test_an_outage_during_a_blocked_fetch_is_a_bus_error(prefix: str) -> None:
    async with proxied_redis() as (proxy, url), bus_at(url, prefix) as bus:
        consumer = bus.consumer(TOPIC, "g", "c")
        await consumer.fetch(timeout_s=0)
        waiting = asyncio.create_task(consumer.fetch(timeout_s=10))
        await asyncio.sleep(0.1)
        await proxy.stop()
        with pytest.raises(BusError):
            await asyncio.wait_for(waiting, 5)


async def lose_the_data(admin: Redis, prefix: str) -> None:
    """What a Redis restart without persistence does to a bus: every key is gone."""
    keys = [key async for key in admin.scan_iter(match=f"{prefix}*")]
    assert keys, "the bus wrote nothing to lose"
    await admin.delete(*keys)


async def test_events_redis_lost_are_published_again_by_their_publisher(
    prefix: str, admin: Redis
) -> None:
    async with bus_at(REDIS_URL, prefix) as publisher, bus_at(REDIS_URL, prefix) as listener:
        consumer = listener.consumer(TOPIC, "g", "c")
        await consumer.fetch(timeout_s=0)
        for n in range(3):
            await publisher.publish(TOPIC, {"n": n})
        # Nobody read them before Redis lost them, and the publisher publishes no more:
        # its epoch watcher notices the new data set and publishes them again.
        await lose_the_data(admin, prefix)
        got = await drain(consumer, 3, timeout_s=10)
        assert sorted(m.payload["n"] for m in got) == [0, 1, 2]


async def test_the_next_publish_after_a_data_loss_brings_the_lost_events_back(
    prefix: str, admin: Redis
) -> None:
    async with bus_at(REDIS_URL, prefix) as publisher, bus_at(REDIS_URL, prefix) as listener:
        consumer = listener.consumer(TOPIC, "g", "c")
        await consumer.fetch(timeout_s=0)
        await publisher.publish(TOPIC, {"n": 0})
        assert [m.payload for m in await drain(consumer, 1)] == [{"n": 0}]
        await publisher.publish(TOPIC, {"n": 1})
        await lose_the_data(admin, prefix)
        await publisher.publish(TOPIC, {"n": 2})
        # The lost one comes back (and, delivery being at least once, the read one too).
        got = {m.payload["n"] for m in await drain(consumer, 3, timeout_s=5)}
        assert got == {0, 1, 2}
