"""Opening the bus at service start: URL checks, the bounded wait, health checks.

Redis cases use the real Redis (marked ``redis``); a FaultProxy in front of it stands in
for a Redis that is not answering yet.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from sqlalchemy.engine import make_url

from flexinfer_common.bus import BusClientSettings, create_bus, open_bus
from flexinfer_common.bus.memory import MemoryBus
from flexinfer_common.bus.redis import RedisBus, redis_location
from flexinfer_common.errors import BusError, ConfigError
from flexinfer_common.settings import BusSettings
from flexinfer_testing import faultproxy
from flexinfer_testing.ports import free_port
from flexinfer_testing.services import require_redis


def quick(timeout_s: float) -> BusClientSettings:
    """Client settings with a short start-up wait."""
    return BusClientSettings(connect_timeout_s=timeout_s)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("redis://localhost:notaport/0", "Port could not be cast"),
        ("redis://localhost:99999/0", "Port out of range"),
        ("redis://[::1/0", "Invalid IPv6 URL"),
        ("redis://localhost:6379/zero", "not a database number"),
        ("redis://localhost:6379/0?socket_timeout=soon", "socket_timeout"),
        ("kafka://localhost:9092", "not one of"),
    ],
)
def test_a_malformed_bus_url_is_a_config_error(url: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        create_bus(BusSettings(url=url))


def test_messages_name_the_server_but_never_the_password() -> None:
    assert redis_location("redis://user:s3cret@cache.internal:6380/2") == "cache.internal:6380/2"
    assert redis_location("redis://") == "localhost:6379/0"


async def test_open_bus_returns_a_bus_that_answers() -> None:
    bus = await open_bus(BusSettings(url="memory://"), quick(1))
    assert isinstance(bus, MemoryBus)
    assert await bus.healthy()
    await bus.close()


@pytest.mark.redis
async def test_open_bus_gives_up_after_the_connect_timeout() -> None:
    port = free_port()
    settings = BusSettings(url=f"redis://127.0.0.1:{port}/0")
    started = time.monotonic()
    with pytest.raises(BusError) as caught:
        await open_bus(settings, quick(1.0))
    waited = time.monotonic() - started
    message = str(caught.value)
    assert f"127.0.0.1:{port}/0" in message
    assert "FLEXINFER_BUS_CONNECT_TIMEOUT_S" in message
    assert "\n" not in message
    assert 1.0 <= waited < 5.0


@pytest.mark.redis
async def test_open_bus_waits_for_a_redis_that_answers_late() -> None:
    target = make_url(require_redis())
    with faultproxy.fault_proxy(
        (target.host or "127.0.0.1", target.port or 6379), faultproxy.RESET
    ) as late:
        url = f"redis://127.0.0.1:{late.port}/{target.database or 0}"
        opening = asyncio.create_task(open_bus(BusSettings(url=url), quick(20)))
        # Redis "starts" once the client has been turned away twice.
        await asyncio.to_thread(late.wait, "accepted", 2, 10.0)
        assert not opening.done()
        late.fault = faultproxy.PASS
        bus = await asyncio.wait_for(opening, 10)
        try:
            assert isinstance(bus, RedisBus)
            assert await bus.healthy()
        finally:
            await bus.close()


@pytest.mark.redis
async def test_a_database_redis_does_not_have_fails_at_once() -> None:
    target = make_url(require_redis())
    url = f"redis://{target.host}:{target.port or 6379}/9999"
    started = time.monotonic()
    with pytest.raises(ConfigError, match="DB index is out of range"):
        await open_bus(BusSettings(url=url), quick(20))
    assert time.monotonic() - started < 5, "a refusal is not retried for the whole window"


@pytest.mark.redis
async def test_healthy_follows_the_server() -> None:
    target = make_url(require_redis())
    with faultproxy.fault_proxy((target.host or "127.0.0.1", target.port or 6379)) as link:
        bus = RedisBus.from_url(f"redis://127.0.0.1:{link.port}/{target.database or 0}")
        try:
            assert await bus.healthy()
            link.fault = faultproxy.BLACKHOLE
            link.drop_all()
            started = time.monotonic()
            assert not await bus.healthy(timeout_s=0.5)
            assert time.monotonic() - started < 2.0, "healthy() is bounded by its timeout"
            link.fault = faultproxy.PASS
            assert await bus.healthy()
        finally:
            await bus.close()
