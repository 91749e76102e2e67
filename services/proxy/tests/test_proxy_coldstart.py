"""Scale from zero through the proxy: queueing, one demand, release, timeouts, activity."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from flexinfer_common.bus import Message, topics
from flexinfer_common.bus.memory import MemoryBus
from flexinfer_common.bus.topics import (
    ActivityEvent,
    DemandEvent,
    EndpointInfo,
    EndpointsEvent,
)
from flexinfer_common.serving import serve_in_background as serve_asgi
from flexinfer_common.settings import StoreSettings
from flexinfer_common.store import EndpointRecord, ModelStore, create_store
from flexinfer_proxy.app import create_app
from flexinfer_proxy.core.service import ProxyCore
from flexinfer_proxy.serve import serve_proxy_in_background
from flexinfer_proxy.settings import ProxySettings
from flexinfer_proxy.testing import FakeUpstream, make_model

KEY = "default/tiny"


class Cold:
    """A running proxy whose model ``tiny`` has no endpoint, plus a fake engine."""

    def __init__(
        self, bus: MemoryBus, store: ModelStore, url: str, core: ProxyCore, up: str
    ) -> None:
        self.bus, self.store, self.url, self.core, self.up = bus, store, url, core, up
        self.demands = bus.consumer(topics.DEMAND, "test", "t")
        self.activity = bus.consumer(topics.ACTIVITY, "test", "t")

    async def publish_endpoint(self, revision: int = 1) -> None:
        """Announce the fake engine as tiny's ready endpoint."""
        event = EndpointsEvent(
            model=KEY,
            endpoints=[EndpointInfo(url=self.up, replica="r0")],
            phase="Ready",
            revision=revision,
        )
        await self.bus.publish(topics.ENDPOINTS, event.model_dump(mode="json"))

    async def post(self, client: httpx.AsyncClient, user: str = "u") -> httpx.Response:
        """One chat completion request for tiny."""
        body = {"model": "tiny", "messages": [], "user": user}
        return await client.post(f"{self.url}/v1/chat/completions", json=body)


async def drain(consumer: Any, wait_s: float = 0.2) -> list[Message]:
    """Every message the consumer gets within ``wait_s``."""
    out: list[Message] = []
    deadline = time.monotonic() + wait_s
    while (left := deadline - time.monotonic()) > 0:
        out.extend(await consumer.fetch(timeout_s=left))
    return out


async def wait_depth(core: ProxyCore, depth: int) -> None:
    """Wait until tiny's queue holds ``depth`` requests."""
    deadline = time.monotonic() + 5
    while core.queue.depth(KEY) != depth:
        assert time.monotonic() < deadline, f"queue depth {core.queue.depth(KEY)} != {depth}"
        await asyncio.sleep(0.005)


@asynccontextmanager
async def cold_stack(
    tmp_path: Path, model_timeout_s: float = 60.0, **overrides: Any
) -> AsyncIterator[tuple[Cold, FakeUpstream]]:
    """Proxy + SQLite store + MemoryBus + fake engine; tiny is declared but cold."""
    bus = MemoryBus()
    store = create_store(StoreSettings(url=f"sqlite:///{tmp_path}/store.db"))
    await store.create_model(make_model("tiny", cold_start_timeout_s=model_timeout_s))
    options: dict[str, Any] = {"demand_resend_interval_s": 30.0, **overrides}
    settings = ProxySettings(port=0, instance_id="cold", **options)
    app = create_app(settings, bus=bus, store=store)
    fake = FakeUpstream()
    try:
        async with (
            serve_asgi(fake) as up,
            serve_proxy_in_background(app, server=settings.server) as url,
        ):
            yield Cold(bus, store, url, app.state.core, up), fake
    finally:
        await bus.close()
        await store.close()


async def test_ten_cold_requests_one_demand_then_released_in_order(tmp_path: Path) -> None:
    async with cold_stack(tmp_path) as (cold, fake), httpx.AsyncClient(timeout=10) as client:
        tasks = []
        for index in range(10):
            tasks.append(asyncio.create_task(cold.post(client, user=f"u{index}")))
            await wait_depth(cold.core, index + 1)
        demands = await drain(cold.demands, 0.5)
        # One demand loop (singleflight): the first event, then depth updates (throttled),
        # all with the same since; never one event per request.
        events = [DemandEvent.model_validate(d.payload) for d in demands]
        assert 1 <= len(events) <= 3
        assert len({e.since for e in events}) == 1
        assert events[-1].queue_depth == 10
        event = events[0]
        assert event.model == KEY
        assert event.proxy == "cold"
        assert not fake.seen  # nothing was forwarded while cold
        await cold.publish_endpoint()
        responses = await asyncio.gather(*tasks)
    assert [r.status_code for r in responses] == [200] * 10
    assert [s.json()["user"] for s in fake.seen] == [f"u{i}" for i in range(10)]
    assert cold.core.queue.depth(KEY) == 0


async def test_queue_full_is_503_with_retry_after(tmp_path: Path) -> None:
    async with (
        cold_stack(tmp_path, max_queue_size=2) as (cold, _),
        httpx.AsyncClient(timeout=10) as client,
    ):
        waiting = [asyncio.create_task(cold.post(client)) for _ in range(2)]
        await wait_depth(cold.core, 2)
        rejected = await cold.post(client)
        await cold.publish_endpoint()
        served = await asyncio.gather(*waiting)
    assert rejected.status_code == 503
    assert int(rejected.headers["retry-after"]) >= 1
    assert rejected.json()["error"]["code"] == "queue_full"
    assert [r.status_code for r in served] == [200, 200]


async def test_activation_timeout_is_503(tmp_path: Path) -> None:
    async with (
        cold_stack(tmp_path, model_timeout_s=0.4, queue_timeout=0.2, cold_start_timeout=0.2) as (
            cold,
            _,
        ),
        httpx.AsyncClient(timeout=10) as client,
    ):
        started = time.monotonic()
        response = await cold.post(client)
        waited = time.monotonic() - started
    assert response.status_code == 503
    assert "retry-after" in response.headers
    error = response.json()["error"]
    assert error["code"] == "activation_timeout"
    assert error["message"].startswith("model tiny activation timed out after 0.4")
    assert 0.35 < waited < 3
    assert cold.core.queue.depth(KEY) == 0


async def test_disconnect_while_queued_frees_the_slot(tmp_path: Path) -> None:
    async with cold_stack(tmp_path, max_queue_size=1) as (cold, _):
        async with httpx.AsyncClient(timeout=10) as gone:
            task = asyncio.create_task(cold.post(gone))
            await wait_depth(cold.core, 1)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        await wait_depth(cold.core, 0)
        async with httpx.AsyncClient(timeout=10) as client:
            waiting = asyncio.create_task(cold.post(client))
            await wait_depth(cold.core, 1)
            await cold.publish_endpoint()
            response = await waiting
    assert response.status_code == 200


async def test_demand_is_resent_while_requests_wait(tmp_path: Path) -> None:
    async with (
        cold_stack(tmp_path, demand_resend_interval_s=0.1) as (cold, _),
        httpx.AsyncClient(timeout=10) as client,
    ):
        waiting = asyncio.create_task(cold.post(client))
        demands = await drain(cold.demands, 0.45)
        await cold.publish_endpoint()
        response = await waiting
        after = await drain(cold.demands, 0.25)
    assert 3 <= len(demands) <= 6
    assert response.status_code == 200
    assert len(after) <= 1  # the loop stops once the queue is empty


async def test_endpoint_found_in_store_releases_waiters(tmp_path: Path) -> None:
    async with (
        cold_stack(tmp_path, demand_resend_interval_s=0.05) as (cold, fake),
        httpx.AsyncClient(timeout=10) as client,
    ):
        waiting = asyncio.create_task(cold.post(client))
        await wait_depth(cold.core, 1)
        # The endpoint event was lost: the proxy must find the endpoint in the store.
        record = EndpointRecord(KEY, "r0", cold.up, True, None, datetime.now(UTC))
        await cold.store.put_endpoint(record)
        response = await waiting
    assert response.status_code == 200
    assert len(fake.seen) == 1


async def test_stale_endpoint_events_are_dropped(tmp_path: Path) -> None:
    async with (
        cold_stack(tmp_path, model_timeout_s=0.3, queue_timeout=0.3, cold_start_timeout=0.3) as (
            cold,
            _,
        ),
        httpx.AsyncClient(timeout=10) as client,
    ):
        await cold.publish_endpoint(revision=5)
        stale = EndpointsEvent(model=KEY, endpoints=[], phase="Pending", revision=4)
        await cold.bus.publish(topics.ENDPOINTS, stale.model_dump(mode="json"))
        gone = EndpointsEvent(model=KEY, endpoints=[], phase="Idle", revision=6)
        ok = await cold.post(client)
        await cold.bus.publish(topics.ENDPOINTS, gone.model_dump(mode="json"))
        deadline = time.monotonic() + 5
        while cold.core.table.revision(KEY) != 6:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.01)
        timed_out = await cold.post(client)
    assert ok.status_code == 200
    assert timed_out.status_code == 503


async def test_activity_events_are_throttled(tmp_path: Path) -> None:
    async with (
        cold_stack(tmp_path, activity_interval_s=0.4) as (cold, _),
        httpx.AsyncClient(timeout=10) as client,
    ):
        await cold.publish_endpoint()
        for _ in range(5):
            assert (await cold.post(client)).status_code == 200
        burst = await drain(cold.activity, 0.1)
        await asyncio.sleep(0.35)
        assert (await cold.post(client)).status_code == 200
        later = await drain(cold.activity, 0.1)
    assert len(burst) == 1
    assert ActivityEvent.model_validate(burst[0].payload).model == KEY
    assert len(later) == 1


async def test_long_stream_keeps_reporting_activity(tmp_path: Path) -> None:
    async with cold_stack(tmp_path, activity_interval_s=0.2) as (cold, fake):
        fake.chunks, fake.chunk_delay_s = 6, 0.25
        await cold.publish_endpoint()
        body = {"model": "tiny", "messages": [], "stream": True}
        async with httpx.AsyncClient(timeout=10) as client:
            response = await client.post(f"{cold.url}/v1/chat/completions", json=body)
        events = [ActivityEvent.model_validate(m.payload) for m in await drain(cold.activity)]
    assert response.status_code == 200
    # One at the start, then the 1 s tick re-reports the open stream at least once.
    assert len(events) >= 2
    assert any(e.active == 1 for e in events[1:])
