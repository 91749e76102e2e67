"""LocalRuntime.sleep and wake with the real reference engine: a sleeping replica keeps its
process but leaves ``list`` and ``gpu_holds``; a restarted controller stops it."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from flexinfer_controller.backends import LaunchSpec, SleepEndpoints
from flexinfer_controller.core.gpu import GPUAssignment
from flexinfer_controller.runtime import ReplicaState
from flexinfer_controller.runtime.local import LocalRuntime, runtime_id
from flexinfer_controller.testing import ReplicaEvents, eventually, kill_marked

ROUTES = SleepEndpoints("/sleep", "/wake_up")
GPU = GPUAssignment(node="n1", vendor="nvidia", devices=(0,), vram_mb=24576)
MODEL = "default/tiny"


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "data"
    yield path
    assert kill_marked(runtime_id(path)) == [], "a test left engines running"


def launch(model_dir: Path) -> LaunchSpec:
    argv = (sys.executable, "-m", "flexinfer_engine", "serve", "--model-dir", str(model_dir),
            "--served-model-name", "tiny", "--host", "127.0.0.1", "--port", "0")  # fmt: skip
    return LaunchSpec(argv=argv, served_name="tiny", gpus=GPU)


async def is_sleeping(url: str) -> bool:
    async with httpx.AsyncClient(base_url=url, timeout=10) as client:
        answer: bool = (await client.get("/is_sleeping")).json()["is_sleeping"]
        return answer


async def test_sleep_frees_the_gpu_and_wake_brings_the_same_process_back(
    data_dir: Path, tiny_model_dir: Path
) -> None:
    events = ReplicaEvents()
    runtime = LocalRuntime(data_dir=data_dir, listener=events, stop_grace_s=2.0)
    try:
        started = await runtime.start(MODEL, 1, launch(tiny_model_dir))
        ready = (await events.wait("ready", timeout_s=120)).replica
        assert ready.url is not None
        assert [h.model for h in runtime.gpu_holds()] == [MODEL]

        slept = await runtime.sleep(started.id, ROUTES, 1, timeout_s=30)
        assert slept is not None
        assert slept.state is ReplicaState.SLEEPING
        assert (await events.wait("slept")).replica == slept
        assert runtime.list() == []
        assert runtime.sleepers(MODEL) == [slept]
        assert runtime.gpu_holds() == []  # its memory is free: others may be placed there
        assert await is_sleeping(ready.url)
        assert await runtime.sleep(started.id, ROUTES, 1, timeout_s=30) is None  # not READY

        woken = await runtime.wake(started.id, ROUTES, timeout_s=30)
        assert woken is not None
        assert (woken.state, woken.pid, woken.url) == (ReplicaState.READY, ready.pid, ready.url)
        assert (await events.wait("ready")).replica == woken
        assert runtime.list() == [woken]
        assert runtime.sleepers() == []
        assert [h.model for h in runtime.gpu_holds()] == [MODEL]
        assert not await is_sleeping(ready.url)
        async with httpx.AsyncClient(base_url=ready.url, timeout=30) as client:
            reply = await client.post(
                "/v1/completions", json={"model": "tiny", "prompt": "hi", "max_tokens": 2}
            )
        assert reply.status_code == 200, reply.text
        assert await runtime.wake(started.id, ROUTES, timeout_s=30) is None  # not asleep
    finally:
        await runtime.close(stop_replicas=True)


async def test_a_sleeping_engine_is_stopped_not_adopted_by_a_restarted_controller(
    data_dir: Path, tiny_model_dir: Path
) -> None:
    events = ReplicaEvents()
    first = LocalRuntime(data_dir=data_dir, listener=events, stop_grace_s=2.0)
    replicas = [await first.start(MODEL, 1, launch(tiny_model_dir)) for _ in range(2)]
    for _ in replicas:
        await events.wait("ready", timeout_s=120)
    asleep, awake = replicas
    assert await first.sleep(asleep.id, ROUTES, 1, timeout_s=30) is not None
    assert asleep.pid is not None
    assert awake.pid is not None

    # The first controller died without closing: the second finds both engines running.
    second = LocalRuntime(data_dir=data_dir, listener=ReplicaEvents(), stop_grace_s=2.0)
    try:
        adopted = await second.adopt()
        assert [r.id for r in adopted] == [awake.id]
        assert not psutil.pid_exists(asleep.pid)
        assert second.sleepers() == []
    finally:
        await second.close(stop_replicas=True)
        await eventually(lambda: first.list() == [], timeout_s=20)
        await first.close(stop_replicas=True)


async def test_close_stops_sleepers_but_leaves_ready_engines_for_adoption(
    data_dir: Path, tiny_model_dir: Path
) -> None:
    events = ReplicaEvents()
    runtime = LocalRuntime(data_dir=data_dir, listener=events, stop_grace_s=2.0)
    replicas = [await runtime.start(MODEL, 1, launch(tiny_model_dir)) for _ in range(2)]
    for _ in replicas:
        await events.wait("ready", timeout_s=120)
    asleep, awake = replicas
    assert await runtime.sleep(asleep.id, ROUTES, 1, timeout_s=30) is not None
    await runtime.close(stop_replicas=False)
    assert asleep.pid is not None
    assert awake.pid is not None
    assert not psutil.pid_exists(asleep.pid)
    assert psutil.pid_exists(awake.pid)
    assert kill_marked(runtime_id(data_dir)) != []  # the ready one, left for adoption
