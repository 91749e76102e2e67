"""The whole controller app on a MemoryBus and SQLite: demand, idle, adoption, crashes, delete."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path

import httpx
import pytest

from flexinfer_common.api import Model
from flexinfer_common.api.status import blocked_reason
from flexinfer_common.bus import topics
from flexinfer_common.bus.memory import MemoryBus
from flexinfer_common.settings import StoreSettings
from flexinfer_common.store import ModelStore, create_store
from flexinfer_controller.core.controller import Controller
from flexinfer_controller.core.gpu import RECHECK_S
from flexinfer_controller.testing import (
    Harness,
    demand,
    engine_pids,
    eventually,
    fake_model_dir,
    kill_engines,
    model_doc,
    run_controller,
)


@pytest.fixture(autouse=True)
def no_leftovers(tmp_path: Path) -> Iterator[None]:
    yield
    assert kill_engines(tmp_path) == [], "a test left engines running"


async def test_demand_starts_then_idle_timeout_stops(tmp_path: Path) -> None:
    source = fake_model_dir(tmp_path / "m").as_uri()
    # No periodic resync within the test: only the demand event can start the engine.
    async with run_controller(tmp_path, resync_interval_s=3600) as h:
        await h.put_model(model_doc("tiny", source, idle_timeout="1s"))
        idle = await h.wait_phase("tiny", "Idle")
        assert idle.status.desired_replicas == 0
        assert engine_pids(tmp_path) == []

        await h.publish(topics.DEMAND, demand())
        event = await h.endpoints_event("default/tiny", timeout_s=60, count=1)
        assert len(event.endpoints) == 1
        url = event.endpoints[0].url
        assert url.startswith("http://127.0.0.1:")
        assert event.phase == "Ready"
        ready = await h.wait_phase("tiny", "Ready")
        assert ready.status.endpoint == url
        assert ready.status.ready_replicas == 1
        assert ready.status.last_active_time is not None
        records = (await h.client.get("/v1/admin/endpoints")).json()["items"]
        assert [r["url"] for r in records] == [url]
        assert len(engine_pids(tmp_path)) == 1

        # No more demand: the idle timeout (1 s) expires and the engine is stopped.
        empty = await h.endpoints_event("default/tiny", timeout_s=20)
        assert empty.endpoints == []
        assert empty.revision > event.revision
        idle = await h.wait_phase("tiny", "Idle")
        assert idle.status.replicas == 0
        assert await h.store.list_endpoints("default/tiny") == []
        await _wait_no_engines(tmp_path)


async def test_engine_slower_than_the_idle_timeout_is_not_stopped(tmp_path: Path) -> None:
    # Regression: the idle clock counted from the demand, so an engine that took longer to
    # start than idleTimeout was stopped before the queued requests could reach it.
    source = fake_model_dir(tmp_path / "m", ready_delay_s=1.5).as_uri()
    async with run_controller(tmp_path) as h:
        await h.put_model(model_doc("tiny", source, idle_timeout="1s"))
        await h.wait_phase("tiny", "Idle")
        await h.publish(topics.DEMAND, demand())
        event = await h.endpoints_event("default/tiny", count=1, timeout_s=10)
        assert len(event.endpoints) == 1
        assert len(engine_pids(tmp_path)) == 1, "exactly one start, no stop-and-restart"
        ready = await h.wait_phase("tiny", "Ready")
        assert ready.status.ready_replicas == 1
        # Once ready it gets a whole idle timeout, then goes back to zero.
        await h.wait_phase("tiny", "Idle", timeout_s=10)
        await _wait_no_engines(tmp_path)


async def _wait_no_engines(tmp_path: Path) -> None:
    await eventually(lambda: not engine_pids(tmp_path))


async def test_activity_moves_last_active_forward_only(tmp_path: Path) -> None:
    async with run_controller(tmp_path) as h:
        for name in ("tiny", "other"):
            await h.put_model(model_doc(name, f"HF://org/{name}"))
            await h.wait_phase(name, "Pending")
        at = datetime.now(UTC) - timedelta(seconds=30)
        await activity(h, "tiny", at)
        await eventually(lambda: last_active(h, "tiny", at))
        await h.publish(
            topics.ACTIVITY,
            topics.ActivityEvent(model="default/tiny", at=at - timedelta(seconds=60), active=0),
        )
        # Events are handled a batch at a time, each acked after its reconciles ran: once
        # the second of two later events is stored, the older one has been handled.
        for later in (at + timedelta(seconds=1), at + timedelta(seconds=2)):
            await activity(h, "other", later)
            await eventually(partial(last_active, h, "other", later))
        model = await h.store.get_model("default", "tiny")
        assert model.status.last_active_time == at


async def activity(h: Harness, name: str, at: datetime) -> None:
    """Publish one activity event for ``name``, as a proxy does."""
    await h.publish(topics.ACTIVITY, topics.ActivityEvent(model=f"default/{name}", at=at, active=1))


async def last_active(h: Harness, name: str, at: datetime) -> bool:
    """Whether ``name``'s stored lastActiveTime is ``at``."""
    model = await h.store.get_model("default", name)
    return model.status.last_active_time == at


async def _reconciled(h: Harness) -> None:
    """Until this controller finished a reconcile: its engine starts are counted by then."""
    done = h.app.state.metrics.reconciles.labels("ok")
    await eventually(lambda: done._value.get() >= 1)


@pytest.fixture
async def kept(tmp_path: Path) -> AsyncIterator[tuple[ModelStore, MemoryBus]]:
    """A store and a bus that outlive one controller, for the next one to pick up."""
    store = create_store(StoreSettings(url=f"sqlite:///{tmp_path / 'store.db'}"))
    bus = MemoryBus()
    yield store, bus
    await store.close()
    await bus.close()


@asynccontextmanager
async def _serving_tiny(
    tmp_path: Path, kept: tuple[ModelStore, MemoryBus]
) -> AsyncIterator[tuple[Harness, str, Model]]:
    """A controller serving Model "tiny" on one engine, which outlives it; yields the
    harness, the model's source and its Ready Model."""
    source = fake_model_dir(tmp_path / "m").as_uri()
    store, bus = kept
    async with run_controller(tmp_path, store=store, bus=bus, stop_engines_on_shutdown=False) as h:
        await h.put_model(model_doc("tiny", source, minReplicas=1))
        yield h, source, await h.wait_phase("tiny", "Ready")


async def test_restarted_controller_adopts_engine(
    tmp_path: Path, kept: tuple[ModelStore, MemoryBus]
) -> None:
    store, bus = kept
    async with _serving_tiny(tmp_path, kept) as (_, _, first):
        pass  # the controller stops and leaves its engine running
    pids = engine_pids(tmp_path)
    assert len(pids) == 1, "the engine must survive a controller that does not stop it"
    async with run_controller(tmp_path, store=store, bus=bus) as h:
        # Adoption happens before the app reports ready: the same engine serves at once.
        again = await h.wait_phase("tiny", "Ready", timeout_s=2)
        assert again.status.endpoint == first.status.endpoint
        assert (await h.client.get("/readyz")).status_code == 200
        await _reconciled(h)  # a wrongly started second engine would be counted by now
        assert h.app.state.metrics.engine_starts.labels("reference")._value.get() == 0
        assert engine_pids(tmp_path) == pids
    await _wait_no_engines(tmp_path)


async def test_crash_loop_goes_failed(tmp_path: Path) -> None:
    source = fake_model_dir(tmp_path / "m", mode="crash").as_uri()
    async with run_controller(tmp_path) as h:
        await h.put_model(model_doc("tiny", source, minReplicas=1))
        failed = await h.wait_phase("tiny", "Failed")
        loaded = {c.type: c for c in failed.status.conditions}["Loaded"]
        assert loaded.reason == "CrashLoopBackOff"
        assert "crashing on purpose" in loaded.message
        starts = h.app.state.metrics.engine_starts.labels("reference")._value.get()
        assert starts == 3  # restarted after each crash, until the crash-loop limit
        # One scale-up (0 -> 1 wanted): the restarts are engine starts, not scale events.
        assert h.app.state.metrics.scale_events.labels("up")._value.get() == 1
        await _wait_no_engines(tmp_path)
        assert h.app.state.metrics.engine_starts.labels("reference")._value.get() == 3


async def test_crash_after_ready_restarts(tmp_path: Path) -> None:
    source = fake_model_dir(tmp_path / "m", mode="die-after-ready", die_after_s=0.3).as_uri()
    async with run_controller(tmp_path, crash_loop_limit=50) as h:
        await h.put_model(model_doc("tiny", source, minReplicas=1))
        first = await h.endpoints_event("default/tiny", count=1)
        gone = await h.endpoints_event("default/tiny")
        assert gone.endpoints == []
        back = await h.endpoints_event("default/tiny", count=1)
        assert len(back.endpoints) == 1
        assert back.endpoints[0].replica != first.endpoints[0].replica


async def test_delete_stops_engine(tmp_path: Path) -> None:
    source = fake_model_dir(tmp_path / "m").as_uri()
    async with run_controller(tmp_path) as h:
        await h.put_model(model_doc("tiny", source, scaleToZero=False))
        await h.endpoints_event("default/tiny", count=1)
        await h.wait_phase("tiny", "Ready")
        response = await h.client.delete("/v1/admin/models/tiny")
        assert response.status_code == 204
        down = await h.endpoints_event("default/tiny")
        assert down.endpoints == []
        await _wait_no_engines(tmp_path)
        assert await h.store.list_endpoints() == []
        assert (await h.client.get("/v1/admin/models/tiny")).status_code == 404


async def test_spec_change_replaces_replica(tmp_path: Path) -> None:
    source = fake_model_dir(tmp_path / "m").as_uri()
    async with run_controller(tmp_path) as h:
        doc = model_doc("tiny", source, minReplicas=1)
        await h.put_model(doc)
        old = await h.endpoints_event("default/tiny", count=1)
        doc["spec"]["litellm"] = {"servedModelName": "renamed"}
        await h.put_model(doc)
        new = await h.endpoints_event("default/tiny")
        # The new replica is published alone, only after it is ready (start, then stop old).
        assert len(new.endpoints) == 1
        assert new.endpoints[0].replica != old.endpoints[0].replica
        model = await h.wait_phase("tiny", "Ready")
        assert model.status.observed_generation == 2
        await eventually(lambda: len(engine_pids(tmp_path)) == 1)


async def test_scaling_keeps_the_replicas_that_serve(tmp_path: Path) -> None:
    """A change of spec.serverless alone (replicas, timeouts) renders the same engine: the
    serving replica is carried over to the new generation, never restarted."""
    source = fake_model_dir(tmp_path / "m").as_uri()
    async with run_controller(tmp_path) as h:
        await h.put_model(model_doc("tiny", source, minReplicas=1, maxReplicas=3))
        (first,) = (await h.endpoints_event("default/tiny", count=1)).endpoints
        (pid,) = engine_pids(tmp_path)

        await h.put_model(model_doc("tiny", source, minReplicas=2, maxReplicas=3))
        both = await h.endpoints_event("default/tiny", count=2)
        assert first.replica in {e.replica for e in both.endpoints}
        assert pid in engine_pids(tmp_path)
        await eventually(lambda: len(engine_pids(tmp_path)) == 2)
        model = await h.wait_phase("tiny", "Ready")
        assert model.status.observed_generation == 2

        await h.put_model(model_doc("tiny", source, minReplicas=1, maxReplicas=3))
        (left,) = (await h.endpoints_event("default/tiny", count=1)).endpoints
        await eventually(lambda: len(engine_pids(tmp_path)) == 1)
        assert (await h.wait_phase("tiny", "Ready")).status.observed_generation == 3
        starts = h.app.state.metrics.engine_starts.labels("reference")._value.get()
        assert starts == 2  # the first replica and the second: no replacement
        assert left.replica in {first.replica, *(e.replica for e in both.endpoints)}


async def _stream(url: str, tokens: int) -> list[str]:
    """A streamed completion straight from an engine: its data lines."""
    async with (
        httpx.AsyncClient(timeout=30) as client,
        client.stream("POST", f"{url}/v1/completions", json={"max_tokens": tokens}) as answer,
    ):
        return [line async for line in answer.aiter_lines() if line.startswith("data: ")]


async def _all_streaming(urls: list[str]) -> bool:
    """Whether every engine's metrics page counts a request in flight."""
    async with httpx.AsyncClient(timeout=5) as client:
        pages = [(await client.get(f"{url}/metrics")).text for url in urls]
    return all("flexinfer_engine_num_requests_running 1" in page for page in pages)


async def test_a_scale_in_lets_the_leaving_replica_finish_its_streams(tmp_path: Path) -> None:
    """The replica a scale-in stops is withdrawn at once and drained, not cut off: the
    stand-in engine dies at SIGTERM, so a stream it still wrote would end early."""
    source = fake_model_dir(tmp_path / "m", token_delay_s=0.05).as_uri()
    async with run_controller(tmp_path) as h:
        await h.put_model(model_doc("tiny", source, minReplicas=2, maxReplicas=2))
        both = await h.endpoints_event("default/tiny", count=2)
        # 40 tokens, 0.05 s apart: each stream outlives the runtime's 2 s stop grace.
        streams = [asyncio.create_task(_stream(e.url, 40)) for e in both.endpoints]
        await eventually(lambda: _all_streaming([e.url for e in both.endpoints]))
        await h.put_model(model_doc("tiny", source, minReplicas=1, maxReplicas=1))
        (kept,) = (await h.endpoints_event("default/tiny", count=1)).endpoints
        for lines in await asyncio.gather(*streams):
            assert lines[-1] == "data: [DONE]"
            assert len(lines) == 41
        await eventually(lambda: len(engine_pids(tmp_path)) == 1)
        (drain,) = h.app.state.drainer.results
        assert drain.replica != kept.replica
        assert (drain.timed_out, drain.in_flight) == (False, 0)


async def test_a_restarted_controller_keeps_a_carried_over_replica(
    tmp_path: Path, kept: tuple[ModelStore, MemoryBus]
) -> None:
    """The carried-over generation is in the engine's state file: adopted as current."""
    store, bus = kept
    async with _serving_tiny(tmp_path, kept) as (h, source, _):
        pids = engine_pids(tmp_path)
        await h.put_model(model_doc("tiny", source, idle_timeout="600s", minReplicas=1))
        assert (await h.wait_phase("tiny", "Ready")).status.observed_generation == 2
        (replica,) = h.app.state.controller.runtime.list("default/tiny")
        assert (replica.generation, engine_pids(tmp_path)) == (2, pids)
    async with run_controller(tmp_path, store=store, bus=bus) as h:
        again = await h.wait_phase("tiny", "Ready", timeout_s=2)
        assert again.status.observed_generation == 2
        await _reconciled(h)
        (adopted,) = h.app.state.controller.runtime.list("default/tiny")
        assert (adopted.generation, engine_pids(tmp_path)) == (2, pids)
        assert h.app.state.metrics.engine_starts.labels("reference")._value.get() == 0
    await _wait_no_engines(tmp_path)


@pytest.mark.parametrize(
    ("backend", "condition", "mentions"),
    [
        # spec.gpu omitted is the CPU, as in the operator; vLLM needs a GPU.
        ("vllm", "Schedulable", "'vllm' does not support GPU vendor 'cpu'"),
        ("comfy", "Schedulable", "'comfyui' does not support GPU vendor"),  # alias: canonical
        ("nope", "ConfigValid", "unknown backend 'nope'"),
    ],
)
async def test_unsupported_backend_fails(
    tmp_path: Path, backend: str, condition: str, mentions: str
) -> None:
    source = fake_model_dir(tmp_path / "m").as_uri()
    async with run_controller(tmp_path) as h:
        await h.put_model(model_doc("tiny", source, backend=backend, minReplicas=1))
        failed = await h.wait_phase("tiny", "Failed")
        cond = {c.type: c for c in failed.status.conditions}[condition]
        assert cond.status == "False"
        assert cond.reason == "BackendUnsupported"
        assert mentions in cond.message
        assert failed.status.message
        assert engine_pids(tmp_path) == []


async def test_source_not_ready_is_pending(tmp_path: Path) -> None:
    async with run_controller(tmp_path) as h:
        await h.put_model(model_doc("remote", "HF://org/model", minReplicas=1))
        await h.put_model(model_doc("missing", (tmp_path / "nowhere").as_uri(), minReplicas=1))
        # No registry configured: a remote source cannot be fetched, and says what to set.
        for name, reason in (("remote", "RegistryNotConfigured"), ("missing", "SourceNotFound")):
            pending = await h.wait_phase(name, "Pending")
            cached = {c.type: c for c in pending.status.conditions}["Cached"]
            assert cached.reason == reason
            assert pending.status.desired_replicas == 0
        # A missing directory blocks the model: proxies are told why, at once.
        assert (
            blocked_reason(pending.status) == f"model directory {tmp_path}/nowhere does not exist"
        )
        # The directory appears later: the next reconcile (here: a demand) starts it.
        fake_model_dir(tmp_path / "nowhere")
        await h.publish(topics.DEMAND, demand("default/missing"))
        await h.wait_phase("missing", "Ready")


async def test_a_serving_model_is_reconciled_again_in_30s(tmp_path: Path) -> None:
    """Post-reconcile, as the seed: a Model with ready replicas is requeued after 30 s, so
    that its KV-cache readings stay fresh; the queue's timer shows it, nobody waits 30 s."""
    source = fake_model_dir(tmp_path / "m").as_uri()
    async with run_controller(tmp_path) as h:
        await h.put_model(model_doc("tiny", source, minReplicas=1))
        await h.wait_phase("tiny", "Ready")
        controller: Controller = h.app.state.controller
        assert await controller.sync("default/tiny")
        due = controller.queue.due_in("default/tiny")
        assert due is not None
        assert RECHECK_S - 5 < due <= RECHECK_S
