"""A Redis server (the test's own, no persistence) killed and restarted.

First at the bus level, while events flow: the publisher and the consumers are RedisBus
clients with their own connection pools, and the consumers run the services' own
fetch-handle-ack loop (``flexinfer_common.bus.consume``) in the groups the services use:
the controller's shared ``controller`` group for demand, one broadcast group per proxy for
endpoints. The publisher does what the services' publishers do when publish fails: it
tries again. Events are counted at both ends by their own number. Then under a whole
distributed stack whose bus it is: readiness while it is down, and a cold start across a
restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from flexinfer_common.bus import Message, consume, topics
from flexinfer_common.bus.redis import RedisBus
from flexinfer_common.errors import BusError
from flexinfer_testing import faultlog
from flexinfer_testing.clients import Call, tally, wait_until
from flexinfer_testing.redis_server import RedisServer, redis_server
from flexinfer_testing.stack import Stack, stack_factory

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

EVENTS = 300
"""Events per topic."""

STALLED = 10
"""Events published while the consumers are busy in a handler, just before Redis dies:
accepted by Redis, not yet read by anyone, the ones a Redis without persistence loses."""


def demand(seq: int) -> dict[str, object]:
    """A demand event numbered ``seq`` (in queue_depth)."""
    event = topics.DemandEvent(
        model="default/tiny", queue_depth=seq, since=datetime.now(UTC), proxy="fault-test"
    )
    return event.model_dump(mode="json")


def endpoints(seq: int) -> dict[str, object]:
    """An endpoints event numbered ``seq`` (in revision)."""
    info = topics.EndpointInfo(url=f"http://127.0.0.1:{9000 + seq % 100}", replica=f"r{seq}")
    event = topics.EndpointsEvent(
        model="default/tiny", endpoints=[info], phase="Ready", revision=seq
    )
    return event.model_dump(mode="json")


class Received:
    """A consumer's handler: distinct event numbers, their first arrival, deliveries.

    While ``busy`` is set, each batch handler takes until it is cleared, as a controller's
    handler does while the reconcile it waits for runs.
    """

    def __init__(self, field: str) -> None:
        self.field = field
        self.arrived: dict[int, float] = {}
        self.deliveries = 0
        self.free = asyncio.Event()
        self.free.set()

    @property
    def numbers(self) -> set[int]:
        """The distinct event numbers received."""
        return set(self.arrived)

    async def handle(self, messages: list[Message]) -> None:
        """Note each event's number, then finish once the handler is free."""
        now = time.monotonic()
        for message in messages:
            self.arrived.setdefault(int(message.payload[self.field]), now)
            self.deliveries += 1
        await self.free.wait()

    def worst_lag(self, accepted: dict[int, float]) -> float:
        """The longest wait between an event's first publish attempt and its arrival."""
        return max(self.arrived[seq] - at for seq, at in accepted.items())


@contextlib.asynccontextmanager
async def consuming(
    bus: RedisBus, topic: str, group: str, received: Received
) -> AsyncIterator[None]:
    """Run the services' consume loop for ``group`` until the block exits."""
    consumer = bus.consumer(topic, group, f"{group}-0")
    await consumer.fetch(timeout_s=0)  # the group exists before the first publish
    task = asyncio.create_task(
        consume(bus, consumer, received.handle, topic=topic, retry_s=0.2, batch=50)
    )
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@dataclass
class Flow:
    """What the publisher saw: when each event was first tried, failed attempts, the outage."""

    accepted: dict[int, float] = field(default_factory=dict)
    failed: int = 0
    down_s: float = 0.0


async def publish_until_accepted(
    bus: RedisBus, topic: str, payload: dict[str, object], flow: Flow
) -> None:
    """Publish, trying again after a BusError as the services do (counted in ``flow``)."""
    while True:
        try:
            await bus.publish(topic, payload)
            return
        except BusError:
            flow.failed += 1
            await asyncio.sleep(0.05)


async def wait_for_all(received: list[Received], count: int, timeout_s: float) -> None:
    """Wait until every consumer holds ``count`` distinct events, or fail with what it has."""
    deadline = time.monotonic() + timeout_s
    while any(len(r.numbers) < count for r in received):
        if time.monotonic() > deadline:
            missing = {r.field: sorted(set(range(count)) - r.numbers)[:20] for r in received}
            raise AssertionError(f"events never delivered (first 20 per consumer): {missing}")
        await asyncio.sleep(0.05)


async def test_a_redis_restart_loses_no_demand_or_endpoint_event(tmp_path: Path) -> None:
    """Injected: a third of the way through 300 demand and 300 endpoint events, the
    consumers get busy in their handlers, 10 more events of each are published, and
    redis-server is SIGKILLed. It stays down until publishing failed three times, then
    starts again on the same port with every stream and consumer group gone.

    Asserted: the demand consumer and the endpoints consumer each received all 300 distinct
    events (duplicates allowed: delivery is at least once), the 10 that only the dead
    server held among them.
    """
    with redis_server(tmp_path / "redis") as server:
        publisher = RedisBus.from_url(server.url(), prefix="fault:", retention=10_000)
        listener = RedisBus.from_url(server.url(), prefix="fault:", retention=10_000)
        got = [Received("queue_depth"), Received("revision")]
        try:
            async with (
                consuming(listener, topics.DEMAND, "controller", got[0]),
                consuming(listener, topics.ENDPOINTS, "proxy-fault", got[1]),
            ):
                flow = await publish_across_a_restart(server, publisher, got)
                await wait_for_all(got, EVENTS, timeout_s=30)
        finally:
            await publisher.close()
            await listener.close()
    faultlog.record(
        "Redis SIGKILL + restart (no persistence) while 2x300 events flow",
        f"demand {len(got[0].numbers)}/{EVENTS} distinct ({got[0].deliveries} deliveries), "
        f"endpoints {len(got[1].numbers)}/{EVENTS} distinct ({got[1].deliveries} "
        f"deliveries); {flow.failed} publish attempts failed and were retried",
        max(r.worst_lag(flow.accepted) for r in got),
        redis_down_s=flow.down_s,
    )
    assert got[0].numbers == set(range(EVENTS))
    assert got[1].numbers == set(range(EVENTS))


async def publish_across_a_restart(
    server: RedisServer, bus: RedisBus, consumers: list[Received]
) -> Flow:
    """Publish EVENTS events per topic with the outage described in the test a third in."""
    flow = Flow()
    restart: asyncio.Task[float] | None = None
    for seq in range(EVENTS):
        if seq == EVENTS // 3:
            for consumer in consumers:
                consumer.free.clear()
        if seq == EVENTS // 3 + STALLED:
            restart = asyncio.create_task(outage(server, flow, consumers))
        # Timed from the first attempt: an event's lag includes any wait for Redis.
        flow.accepted[seq] = time.monotonic()
        await publish_until_accepted(bus, topics.DEMAND, demand(seq), flow)
        await publish_until_accepted(bus, topics.ENDPOINTS, endpoints(seq), flow)
    assert restart is not None
    flow.down_s = await restart
    return flow


async def outage(server: RedisServer, flow: Flow, consumers: list[Received]) -> float:
    """SIGKILL Redis, wait until publishing failed 3 times, start it again and free the
    consumers; returns the seconds Redis was down."""
    await asyncio.to_thread(server.stop)
    started = time.monotonic()
    deadline = started + 30
    while flow.failed < 3:
        assert time.monotonic() < deadline, "publishing never failed while Redis was down"
        await asyncio.sleep(0.02)
    await asyncio.to_thread(server.start)
    for consumer in consumers:
        consumer.free.set()
    return time.monotonic() - started


@pytest.fixture(scope="module")
def own_redis_stack(
    tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path
) -> Iterator[tuple[RedisServer, Stack]]:
    """A redis-server of the module's own, and a distributed stack whose bus it is."""
    root = tmp_path_factory.mktemp("redis-stack")
    with (
        redis_server(root / "redis") as server,
        stack_factory("distributed", root, tiny_model_dir) as factory,
    ):
        stack = factory.start(FLEXINFER_BUS_URL=server.url())
        yield server, stack


def readyz(url: str) -> int:
    """The status of GET <url>/readyz (0 when it does not answer)."""
    try:
        return httpx.get(f"{url}/readyz", timeout=5).status_code
    except httpx.HTTPError:
        return 0


@contextlib.contextmanager
def redis_down(server: RedisServer) -> Iterator[None]:
    """Redis killed for the block, then started again (empty)."""
    server.stop()
    try:
        yield
    finally:
        server.start()


def test_the_proxy_is_not_ready_while_the_bus_is_down(
    own_redis_stack: tuple[RedisServer, Stack],
) -> None:
    """Injected: SIGKILL of the stack's Redis. Asserted: the proxy's /readyz answers 503
    within a few seconds, and 200 again once Redis is back."""
    server, stack = own_redis_stack
    with redis_down(server):
        wait_until(lambda: readyz(stack.urls["proxy"]) == 503, 4, "proxy /readyz to say 503")
    wait_until(lambda: readyz(stack.urls["proxy"]) == 200, 10, "proxy /readyz to say 200")


def test_the_controller_is_not_ready_while_the_bus_is_down(
    own_redis_stack: tuple[RedisServer, Stack],
) -> None:
    """Injected: SIGKILL of the stack's Redis. Asserted: the controller's /readyz answers
    503 within a few seconds, and 200 again once Redis is back."""
    server, stack = own_redis_stack
    url = stack.urls["controller"]
    with redis_down(server):
        wait_until(lambda: readyz(url) == 503, 4, "controller /readyz to say 503")
    wait_until(lambda: readyz(url) == 200, 10, "controller /readyz to say 200")


def test_a_cold_start_works_after_redis_restarted_empty(
    own_redis_stack: tuple[RedisServer, Stack],
) -> None:
    """Injected: SIGKILL of the stack's Redis and a restart with every stream and consumer
    group gone, before the first request for a Model declared earlier.

    Asserted: the cold start still happens end to end over the new Redis (the proxy's
    demand reaches the controller, the controller's endpoints reach the proxy): one
    request, one 200, one engine.
    """
    server, stack = own_redis_stack
    stack.apply_model("tiny")
    restarted = time.monotonic()
    server.restart()
    call = Call(stack.base_url, "tiny", max_tokens=4).run()
    faultlog.record(
        "Redis SIGKILL + restart (empty) under an idle stack, then a cold start",
        tally([call]), call.ended - restarted,
    )  # fmt: skip
    assert call.outcome == "200", repr(call.error)
    assert len(stack.engine_processes()) == 1
