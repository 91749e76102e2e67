"""Proxy core logic without HTTP: settings, bodies, endpoints, catalog, queue, activity."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry

from flexinfer_common.api.meta import utcnow
from flexinfer_common.bus import topics
from flexinfer_common.bus.memory import MemoryBus
from flexinfer_common.bus.topics import DemandEvent, EndpointInfo, EndpointsEvent
from flexinfer_common.settings import StoreSettings
from flexinfer_common.store import EndpointRecord, create_store
from flexinfer_proxy.core.activity import activity_interval
from flexinfer_proxy.core.catalog import ModelCatalog, build_name_index
from flexinfer_proxy.core.endpoints import EndpointTable, serving_adapter
from flexinfer_proxy.core.errors import ActivationTimeoutError, BadRequestError, QueueFullError
from flexinfer_proxy.core.extract import check_model_name, parse_json_body
from flexinfer_proxy.core.queue import ColdStartQueue
from flexinfer_proxy.core.service import ProxyCore
from flexinfer_proxy.extract_http import IncomingRequest
from flexinfer_proxy.settings import ProxySettings
from flexinfer_proxy.static import StaticStore
from flexinfer_proxy.sync import ProxySync
from flexinfer_proxy.testing import make_model


def test_settings_accept_operator_names_and_durations(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROXY_MAX_QUEUE_SIZE", "7")
    monkeypatch.setenv("PROXY_QUEUE_TIMEOUT", "90s")
    monkeypatch.setenv("PROXY_COLD_START_TIMEOUT", "2m")
    monkeypatch.setenv("FLEXINFER_PROXY_ACTIVITY_INTERVAL_S", "1m30s")
    settings = ProxySettings()
    assert settings.max_queue_size == 7
    assert settings.queue_timeout == 90
    assert settings.cold_start_timeout == 120
    assert settings.activity_interval_s == 90
    assert ProxySettings.model_validate({"queue_timeout": "250ms"}).queue_timeout == 0.25
    assert settings.instance_id != ProxySettings().instance_id


def test_settings_reject_bad_durations() -> None:
    with pytest.raises(ValueError, match="invalid duration"):
        ProxySettings.model_validate({"queue_timeout": "soon"})


def test_body_is_rewritten_only_when_the_name_changes() -> None:
    raw = b'{"model":"a",  "x": 1}'
    scanned = parse_json_body(raw)
    request = IncomingRequest(name="a", body=raw, length=None, fields=scanned.data, json_model="a")
    request.rewrite("a")
    assert request.body is raw
    request.rewrite("b")
    assert isinstance(request.body, bytes)
    assert parse_json_body(request.body).data == {"model": "b", "x": 1}
    with pytest.raises(BadRequestError):
        check_model_name("", "body")


def _event(revision: int, *urls: str) -> EndpointsEvent:
    infos = [EndpointInfo(url=u, replica=u[-1]) for u in urls]
    return EndpointsEvent(model="ns/m", endpoints=infos, phase="Ready", revision=revision)


def test_endpoint_table_round_robin_cooldown_and_revisions() -> None:
    now = [100.0]
    available: list[str] = []
    table = EndpointTable(cooldown_s=5, clock=lambda: now[0], on_available=available.append)
    assert table.apply_event(_event(2, "http://a", "http://b"))
    assert available == ["ns/m"]
    assert [table.pick("ns/m").url for _ in range(4)] == ["http://a", "http://b"] * 2  # type: ignore[union-attr]
    assert not table.apply_event(_event(1))  # stale: ignored
    table.mark_out("ns/m", "http://a")
    assert {table.pick("ns/m").url for _ in range(3)} == {"http://b"}  # type: ignore[union-attr]
    table.mark_out("ns/m", "http://b")
    assert table.pick("ns/m") is None
    assert not table.usable("ns/m")
    now[0] += 5
    assert table.usable("ns/m")
    assert table.pick("ns/m") is not None


def test_store_reads_older_than_an_event_are_ignored() -> None:
    now = [10.0]
    table = EndpointTable(clock=lambda: now[0])
    table.apply_event(_event(1, "http://a"))
    table.apply_records([], read_started=9.0, models=["ns/m"])
    assert table.urls("ns/m") == ["http://a"]
    table.apply_records([], read_started=11.0, models=["ns/m"])
    assert table.urls("ns/m") == []


def _record(replica: str, url: str) -> EndpointRecord:
    return EndpointRecord(
        model="ns/m", replica=replica, url=url, ready=True, node=None, updated_at=utcnow()
    )


def test_store_reads_keep_which_adapters_each_endpoint_holds() -> None:
    now = [10.0]
    table = EndpointTable(clock=lambda: now[0])
    infos = [
        EndpointInfo(url="http://a", replica="a", adapters=["sql"]),
        EndpointInfo(url="http://b", replica="b", adapters=[]),
    ]
    table.apply_event(EndpointsEvent(model="ns/m", endpoints=infos, phase="Ready", revision=1))
    sql = serving_adapter("sql", loaded=True)
    assert {table.pick("ns/m", serves=sql).url for _ in range(3)} == {"http://a"}  # type: ignore[union-attr]
    # Records do not say: a replica keeps what the last event said of it, and one only
    # the store knows (its event was lost) holds nothing yet.
    records = [_record("a", "http://a"), _record("b", "http://b"), _record("c", "http://c")]
    table.apply_records(records, read_started=11.0, models=["ns/m"])
    held = {e.replica: e.adapters for e in table.endpoints("ns/m")}
    assert held == {"a": ["sql"], "b": [], "c": []}
    # A controller that does not say (events without adapters): unknown, status decides.
    table.apply_event(_event(2, "http://a", "http://b"))
    table.apply_records(records, read_started=12.0, models=["ns/m"])
    assert {e.adapters for e in table.endpoints("ns/m")} == {None}
    assert table.serving("ns/m", sql)
    assert not table.serving("ns/m", serving_adapter("sql", loaded=False))


def test_served_names_win_over_other_models_aliases() -> None:
    first = make_model("a", aliases=["b", "shared"])
    second = make_model("b", aliases=["shared"])
    index = build_name_index([second, first])
    assert index["b"] is second
    assert index["shared"] is first
    assert index["a"] is first


async def test_catalog_rereads_the_store_at_most_once_per_second_per_name(
    tmp_path: Path,
) -> None:
    store = create_store(StoreSettings(url=f"sqlite:///{tmp_path}/s.db"))
    now = [0.0]
    catalog = ModelCatalog(store, "default", clock=lambda: now[0])
    try:
        await catalog.refresh()
        assert await catalog.resolve("late") is None
        await store.create_model(make_model("late"))
        assert await catalog.resolve("late") is None  # throttled: same second
        now[0] += 1.0
        found = await catalog.resolve("late")
        assert found is not None
        assert found.key == "default/late"
    finally:
        await store.close()


def _queue(events: list[DemandEvent], size: int = 10) -> ColdStartQueue:
    async def publish(event: DemandEvent) -> None:
        events.append(event)

    return ColdStartQueue(
        proxy_id="p",
        max_size=size,
        resend_interval_s=30,
        retry_after_s=5,
        publish_demand=publish,
    )


async def test_queue_releases_in_arrival_order_with_one_demand() -> None:
    events: list[DemandEvent] = []
    queue = _queue(events, size=20)
    order: list[int] = []
    deadline = time.monotonic() + 5

    async def waiter(index: int) -> None:
        await queue.wait("ns/m", "m", deadline, time.monotonic())
        order.append(index)

    tasks = [asyncio.create_task(waiter(i)) for i in range(20)]
    await asyncio.sleep(0.01)
    assert queue.depth("ns/m") == 20
    assert len(events) == 1
    assert queue.release("ns/m") == 20
    await asyncio.gather(*tasks)
    assert order == list(range(20))
    await queue.aclose()


async def test_queue_full_timeout_and_cancellation_free_slots() -> None:
    queue = _queue([], size=1)
    start = time.monotonic()
    first = asyncio.create_task(queue.wait("ns/m", "m", start + 5, start))
    await asyncio.sleep(0.01)
    with pytest.raises(QueueFullError):
        await queue.wait("ns/m", "m", start + 5, start)
    first.cancel()
    await asyncio.gather(first, return_exceptions=True)
    assert queue.depth("ns/m") == 0
    with pytest.raises(ActivationTimeoutError, match=r"model m activation timed out after 0\.0"):
        await queue.wait("ns/m", "m", time.monotonic() + 0.05, time.monotonic())
    assert queue.depth("ns/m") == 0
    await queue.aclose()


def test_activity_interval_is_capped_by_a_third_of_the_idle_timeout() -> None:
    assert activity_interval(60, 300) == 60
    assert activity_interval(60, 30) == 10


def test_main_rejects_bad_settings_with_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from flexinfer_proxy.__main__ import main

    monkeypatch.setenv("PROXY_QUEUE_TIMEOUT", "never")
    assert main(["--port", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("flexinfer-proxy: invalid setting")
    assert "\n" not in err


async def test_main_serves_until_terminated(tmp_path: Path) -> None:
    env = {**os.environ, "FLEXINFER_STORE_URL": f"sqlite:///{tmp_path}/s.db"}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "flexinfer_proxy",
        "--port",
        "0",
        "--log-level",
        "info",
        env=env,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stderr is not None
    try:
        async with asyncio.timeout(30):
            while b"serving on" not in (line := await proc.stderr.readline()):
                assert line, "the proxy exited before serving"
        url = line.decode().rsplit(" ", 1)[1].strip()
        async with httpx.AsyncClient() as client:
            assert (await client.get(f"{url}/readyz")).status_code == 200
            models = (await client.get(f"{url}/v1/models")).json()
        assert models == {"object": "list", "data": []}
    finally:
        proc.send_signal(signal.SIGTERM)
        assert await proc.wait() == 0


async def test_sync_consumers_stop_when_the_bus_closes() -> None:
    # A closed bus answers fetch() at once; a consumer that kept looping would never yield,
    # starving the loop (a SIGTERM'd proxy then spun forever instead of exiting).
    bus = MemoryBus()
    store = StaticStore.from_declarations([], "default")
    core = ProxyCore(ProxySettings(), bus=bus, store=store, registry=CollectorRegistry())
    sync = ProxySync(core)
    await sync.start()
    names = (topics.ENDPOINTS, topics.MODELS, topics.ADAPTERS, topics.PROGRESS)
    consumers = {f"proxy-consume-{name}" for name in names}
    tasks = [t for t in asyncio.all_tasks() if t.get_name() in consumers]
    assert len(tasks) == len(consumers)
    await bus.close()
    done, pending = await asyncio.wait(tasks, timeout=5)
    assert not pending
    assert all(t.exception() is None for t in done)
    await sync.stop()
    await core.aclose()
