"""Sleep instead of stop, through the running controller with real reference engines: an
idle Model sleeps, wakes on demand in the same process, and is stopped after the second
timeout; a shared-GPU swap sleeps the loser and wakes it when it wins the GPU back."""

from __future__ import annotations

import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from flexinfer_common.api import Model
from flexinfer_common.bus import topics
from flexinfer_controller.core.controller import Controller
from flexinfer_controller.testing import (
    Harness,
    demand,
    eventually,
    kill_engines,
    model_doc,
    run_controller,
)

pytestmark = pytest.mark.slow

GPU = [{"vendor": "nvidia", "arch": "sm_89", "vram": "24Gi", "node": "n1"}]
"""One 24 GiB GPU: two 16000 MB estimates do not fit on it together."""
WINDOW_S = 2.0
SHARING = {"mode": "arbiter", "demand_window_s": WINDOW_S, "swap_cooldown_s": 600.0}
BUDGET = {"budget_mb": 4096, "process_mb": 1024}
"""Room for both tiny Models' sleepers (each ~1 MiB of weights and 1024 MiB of process)."""
A, B = "default/a", "default/b"


@pytest.fixture
def source(tmp_path: Path, tiny_model_dir: Path) -> Iterator[str]:
    """The session's tiny model; no engine may outlive the test."""
    yield tiny_model_dir.as_uri()
    assert kill_engines(tmp_path) == [], "a test left engines running"


async def stored(h: Harness, key: str) -> Model:
    return await h.store.get_model("default", key.split("/")[1])


async def until(
    h: Harness, key: str, check: Callable[[Model], bool], timeout_s: float = 60
) -> Model:
    """Poll the stored Model ``key`` until a status of its current spec passes ``check``."""
    found: list[Model] = []

    async def holds() -> bool:
        model = await stored(h, key)
        found[:] = [model]
        current = model.status.observed_generation == model.metadata.generation
        return current and check(model)

    try:
        await eventually(holds, timeout_s=timeout_s)
    except AssertionError:
        status = found[0].status.model_dump(mode="json") if found else None
        raise AssertionError(f"{key} never passed the check; last status {status}") from None
    return found[0]


def sleeping(model: Model) -> bool:
    return model.status.residency == "Sleeping"


async def engine_info(url: str) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=url, timeout=10) as client:
        info: dict[str, Any] = (await client.get("/engine/info")).json()
        return info


async def serve(h: Harness, key: str) -> tuple[str, int]:
    """Ask for ``key`` as a proxy does; its engine's URL and pid once it serves."""
    await h.publish(topics.DEMAND, demand(key))
    model = await until(h, key, lambda m: m.status.phase == "Ready", timeout_s=120)
    assert model.status.endpoint is not None
    return model.status.endpoint, (await engine_info(model.status.endpoint))["pid"]


async def test_an_idle_model_sleeps_then_stops_after_the_second_timeout(
    tmp_path: Path, source: str
) -> None:
    sleep = {**BUDGET, "stop_after_s": 5.0}  # long enough to look at the sleeper first
    async with run_controller(tmp_path, engine_python=sys.executable, sleep=sleep) as h:
        runtime = h.app.state.controller.runtime
        await h.put_model(model_doc("a", source, idle_timeout="2s"))
        url, pid = await serve(h, A)

        model = await until(h, A, sleeping)
        assert model.status.phase == "Idle"
        assert (model.status.replicas, model.status.endpoint) == (0, None)
        info = await engine_info(url)
        assert (info["pid"], info["sleeping"]) == (pid, True)
        assert runtime.list() == []
        assert [r.pid for r in runtime.sleepers(A)] == [pid]
        withdrawn = await h.endpoints_event(A, count=0)
        assert withdrawn.endpoints == []

        model = await until(h, A, lambda m: m.status.residency == "Stopped")
        await eventually(lambda: not psutil.pid_exists(pid), timeout_s=10)
        assert runtime.sleepers() == []


async def test_a_request_wakes_the_sleeper_in_the_same_process(tmp_path: Path, source: str) -> None:
    sleep = {**BUDGET, "stop_after_s": 600.0}
    async with run_controller(tmp_path, engine_python=sys.executable, sleep=sleep) as h:
        await h.put_model(model_doc("a", source, idle_timeout="2s"))
        url, pid = await serve(h, A)
        await until(h, A, sleeping)

        woken_url, woken_pid = await serve(h, A)  # a wake, not a cold start
        assert (woken_url, woken_pid) == (url, pid)
        model = await stored(h, A)
        assert model.status.residency == "Resident"
        event = await h.endpoints_event(A, count=1)
        assert event.endpoints[0].url == url

        await until(h, A, sleeping)  # idle again: back to sleep
        assert (await h.client.delete("/v1/admin/models/a")).status_code == 204
        await eventually(lambda: not psutil.pid_exists(pid), timeout_s=20)


async def test_an_unload_by_hand_stops_the_engine_rather_than_putting_it_to_sleep(
    tmp_path: Path, source: str
) -> None:
    sleep = {**BUDGET, "stop_after_s": 600.0}
    async with run_controller(tmp_path, engine_python=sys.executable, sleep=sleep) as h:
        runtime = h.app.state.controller.runtime
        await h.put_model(model_doc("a", source, idle_timeout="300s"))
        _, pid = await serve(h, A)
        unloaded = await h.client.post("/v1/admin/models/a/unload")
        assert unloaded.status_code == 200, unloaded.text
        assert unloaded.json()["status"]["residency"] == "Stopped"
        await eventually(lambda: not psutil.pid_exists(pid), timeout_s=20)
        assert runtime.sleepers() == []

        # A sleeper is stopped by an unload too.
        await h.put_model(model_doc("c", source, idle_timeout="2s"))
        _, pid = await serve(h, "default/c")
        await until(h, "default/c", sleeping)
        assert (await h.client.post("/v1/admin/models/c/unload")).status_code == 200
        await eventually(lambda: not psutil.pid_exists(pid), timeout_s=20)
        await until(h, "default/c", lambda m: m.status.residency == "Stopped")


def shared_doc(name: str, source: str) -> dict[str, Any]:
    doc = model_doc(name, source, idle_timeout="300s")
    gpu = {"vendor": "nvidia", "shared": "g", "vramEstimateMB": 16000, "swapCooldown": "1s"}
    doc["spec"]["gpu"] = gpu
    return doc


class Proxy:
    """A proxy holding requests for one Model: it repeats its DemandEvent while they wait."""

    def __init__(self, h: Harness, key: str) -> None:
        self.h = h
        self.key = key
        self.last = 0.0

    async def resend(self) -> None:
        if time.monotonic() - self.last >= WINDOW_S / 4:
            self.last = time.monotonic()
            await self.h.publish(topics.DEMAND, demand(self.key))


async def swapped(
    h: Harness, winner: str, loser: str, tick: Callable[[], Awaitable[None]]
) -> tuple[Model, Model]:
    """Step ``tick`` until ``winner`` serves and ``loser`` sleeps, preempted; at every step
    at most one engine holds the GPU."""
    controller: Controller = h.app.state.controller
    models: dict[str, Model] = {}

    async def observed() -> bool:
        await tick()
        holds = controller.runtime.gpu_holds() or []
        assert len(holds) <= 1, f"two engines hold the GPU: {holds}"
        assert len(controller.runtime.list()) <= 1
        for key in (winner, loser):
            models[key] = await stored(h, key)
        won, lost = models[winner].status, models[loser].status
        return won.phase == "Ready" and lost.phase == "Preempted" and lost.residency == "Sleeping"

    try:
        await eventually(observed, timeout_s=120, interval_s=0.05)
    except AssertionError:
        told = {k: m.status.model_dump(mode="json") for k, m in models.items()}
        raise AssertionError(f"no swap to {winner}; last statuses {told}") from None
    return models[winner], models[loser]


async def test_a_swap_sleeps_the_loser_and_wakes_it_when_it_wins_back(
    tmp_path: Path, source: str
) -> None:
    async with run_controller(
        tmp_path, gpus=GPU, engine_python=sys.executable, gpu_sharing=SHARING, sleep=BUDGET
    ) as h:
        runtime = h.app.state.controller.runtime
        for name in ("a", "b"):
            await h.put_model(shared_doc(name, source))
        a_url, a_pid = await serve(h, A)

        b_proxy, a_proxy = Proxy(h, B), Proxy(h, A)
        _, a = await swapped(h, B, A, b_proxy.resend)
        assert (a.status.replicas, a.status.desired_replicas) == (0, 0)
        assert (await engine_info(a_url))["sleeping"]  # the same process, asleep
        assert [r.pid for r in runtime.sleepers(A)] == [a_pid]
        assert [h.model for h in runtime.gpu_holds()] == [B]

        a, _ = await swapped(h, A, B, a_proxy.resend)
        assert a.status.endpoint == a_url
        info = await engine_info(a_url)
        assert (info["pid"], info["sleeping"]) == (a_pid, False)  # woken, not started again
        assert [h.model for h in runtime.gpu_holds()] == [A]
        assert len(runtime.sleepers(B)) == 1
