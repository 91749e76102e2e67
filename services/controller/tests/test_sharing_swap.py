"""A swap in the running controller (core/sharing/drain.py, the arbiter's fallback, the swap
metrics): two stand-in engines of one shared group on one declared 24 GiB GPU.

The loser's streamed completion finishes while the swap waits for it, a drain longer than
the grace is cut off at it, a winner that crashes while loading hands the GPU back, and
the controller's own /metrics shows each swap and its steps."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from flexinfer_common.api import Model
from flexinfer_common.bus import topics
from flexinfer_controller.core.controller import Controller
from flexinfer_controller.core.sharing.arbiter import SharedArbiter
from flexinfer_controller.core.sharing.drain import Drainer
from flexinfer_controller.testing import (
    Harness,
    demand,
    eventually,
    fake_model_dir,
    kill_engines,
    model_doc,
    run_controller,
)

GPU = [{"vendor": "nvidia", "arch": "sm_89", "vram": "24Gi", "node": "n1"}]
"""One 24 GiB GPU: two 16000 MB estimates do not fit on it together."""
A, B = "default/a", "default/b"
TOKEN_S = 0.05
"""The stand-in engine streams one chunk every 50 ms."""


@pytest.fixture
def engines_dir(tmp_path: Path) -> Iterator[Path]:
    """Where the Models' stand-in weights live; no engine may outlive the test."""
    yield tmp_path / "models"
    assert kill_engines(tmp_path) == [], "a test left engines running"


def shared_doc(name: str, source: Path, priority: int) -> dict[str, Any]:
    doc = model_doc(name, source.as_uri(), idle_timeout="300s")
    doc["spec"]["gpu"] = {
        "vendor": "nvidia",
        "shared": "g",
        "vramEstimateMB": 16000,
        "swapCooldown": "1s",
        "priority": priority,
    }
    return doc


def sharing(drain_s: float) -> dict[str, Any]:
    return {
        "mode": "arbiter",
        "demand_window_s": 60.0,
        "swap_cooldown_s": 600.0,
        "drain_timeout_s": drain_s,
        "drain_poll_s": 0.1,
    }


async def model(h: Harness, key: str) -> Model:
    return await h.store.get_model("default", key.split("/")[1])


async def phase(h: Harness, key: str) -> str:
    found = await model(h, key)
    done = found.status.observed_generation == found.metadata.generation
    return found.status.phase if done else ""


def runs(controller: Controller, key: str) -> bool:
    """Whether an engine of ``key`` holds the GPU (starting, serving, draining, stopping)."""
    return any(h.model == key for h in controller.runtime.gpu_holds() or [])


async def start_a(h: Harness, dirs: Path, b_behaviour: dict[str, Any]) -> Controller:
    """a (priority 1) serves on the GPU; b (priority 9) is declared."""
    a_dir = fake_model_dir(dirs / "a", token_delay_s=TOKEN_S)
    b_dir = fake_model_dir(dirs / "b", token_delay_s=TOKEN_S, **b_behaviour)
    await h.put_model(shared_doc("a", a_dir, 1))
    await h.put_model(shared_doc("b", b_dir, 9))
    await h.publish(topics.DEMAND, demand(A))
    await h.wait_phase("a", "Ready", timeout_s=30)
    controller: Controller = h.app.state.controller
    return controller


async def stream(url: str, chunks: int, into: list[str]) -> None:
    """A streamed completion of ``chunks`` chunks straight from the engine at ``url``."""
    body = {"model": "a", "prompt": "x", "max_tokens": chunks, "stream": True}
    async with (
        httpx.AsyncClient(timeout=60, trust_env=False) as client,
        client.stream("POST", f"{url}/v1/completions", json=body) as response,
    ):
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                into.append(line.removeprefix("data: "))


async def in_flight_then_swap(
    h: Harness, controller: Controller, chunks: int
) -> tuple[asyncio.Task[None], list[str]]:
    """Start a long completion on a's engine, wait until it runs there, then let b's
    demand preempt a (b's priority is higher; a's 1 s cooldown has passed): the stream's
    task, and the chunks it received so far."""
    (replica,) = controller.runtime.list(A)
    assert replica.url is not None
    received: list[str] = []
    task = asyncio.create_task(stream(replica.url, chunks, received))
    await eventually(lambda: len(received) >= 2, timeout_s=10)
    await h.publish(topics.DEMAND, demand(B))
    return task, received


def drains(h: Harness) -> Drainer:
    drainer: Drainer = h.app.state.drainer
    return drainer


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a Prometheus page: (name, sorted labels) -> value."""
    found = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            found[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return found


async def test_a_long_completion_on_the_loser_finishes_before_its_engine_stops(
    tmp_path: Path, engines_dir: Path
) -> None:
    async with run_controller(tmp_path, gpus=GPU, gpu_sharing=sharing(30.0)) as h:
        controller = await start_a(h, engines_dir, {})
        arbiter = controller.shared_gpu
        assert isinstance(arbiter, SharedArbiter)
        task, received = await in_flight_then_swap(h, controller, chunks=60)  # 3 s
        # a is Preempted and withdrawn at once, while its engine keeps serving the stream.
        await eventually(lambda: bool(arbiter.swaps), timeout_s=10)
        await h.endpoints_event(A, timeout_s=10, count=0)
        a = await h.wait_phase("a", "Preempted")
        assert not task.done()
        assert runs(controller, A)
        assert not runs(controller, B)
        assert a.status.shared_group is not None
        assert (a.status.shared_group.state, a.status.shared_group.preempted_by) == (
            "Preempted",
            B,
        )
        b = await model(h, B)
        assert b.status.shared_group is not None
        assert b.status.shared_group.state == "Active"
        assert "waiting for default/a to finish its running requests" in (b.status.message or "")
        # The whole completion arrives; only then does a stop and b start.
        await task
        assert len(received) == 61
        assert received[-1] == "[DONE]"
        await eventually(lambda: runs(controller, B), timeout_s=20)
        await h.wait_phase("b", "Ready", timeout_s=30)
        result = drains(h).results[-1]
        assert (result.model, result.timed_out) == (A, False)
        assert result.seconds >= 1.0
        await check_metrics(h, drain_s=result.seconds)


async def check_metrics(h: Harness, drain_s: float) -> None:
    """The controller's /metrics shows one swap in g, timed in its three steps."""
    found = samples((await h.client.get("/metrics")).text)
    swaps = {k: v for k, v in found.items() if k[0] == "flexinfer_controller_gpu_swaps_total"}
    assert sum(swaps.values()) == 1.0
    assert all(dict(labels)["group"] == "g" for _, labels in swaps)
    for step in ("drain", "stop", "start"):
        labels = (("group", "g"), ("step", step))
        assert found[("flexinfer_controller_gpu_swap_step_seconds_count", labels)] == 1.0
    drained = (("group", "g"), ("step", "drain"))
    assert found[("flexinfer_controller_gpu_swap_step_seconds_sum", drained)] == pytest.approx(
        drain_s
    )
    assert found[("flexinfer_controller_gpu_swap_seconds_count", (("group", "g"),))] == 1.0


async def test_a_drain_longer_than_the_grace_is_cut_off_at_it(
    tmp_path: Path, engines_dir: Path
) -> None:
    async with run_controller(tmp_path, gpus=GPU, gpu_sharing=sharing(1.0)) as h:
        controller = await start_a(h, engines_dir, {})
        task, received = await in_flight_then_swap(h, controller, chunks=2000)  # 100 s
        await h.wait_phase("b", "Ready", timeout_s=30)
        with contextlib.suppress(httpx.HTTPError):
            await task  # its engine stopped under it: the stream ends short, or breaks
        # Cut off: after the 1 s grace and the engine's 2 s stop grace, far from its end.
        # The bound leaves a busy machine 17 s of slack; the grace's exact end is
        # test_sharing_drain's, on a clock.
        assert "[DONE]" not in received
        assert len(received) < 400
        result = drains(h).results[-1]
        assert (result.model, result.timed_out, result.in_flight) == (A, True, 1)
        assert 1.0 <= result.seconds < 2.5
        found = samples((await h.client.get("/metrics")).text)
        timeouts = found[("flexinfer_controller_gpu_swap_drain_timeouts_total", (("group", "g"),))]
        assert timeouts == 1.0


async def test_a_winner_that_crashes_while_loading_hands_the_gpu_back(
    tmp_path: Path, engines_dir: Path
) -> None:
    async with run_controller(tmp_path, gpus=GPU, gpu_sharing=sharing(30.0)) as h:
        controller = await start_a(h, engines_dir, {"mode": "crash"})
        arbiter = controller.shared_gpu
        assert isinstance(arbiter, SharedArbiter)
        await h.publish(topics.DEMAND, demand(B))
        # b takes the GPU, crashes loading, and a gets it back: each time, up to the crash
        # loop limit (3), after which b is Failed and a keeps serving.
        await h.wait_phase("b", "Failed", timeout_s=60)
        await h.wait_phase("a", "Ready", timeout_s=30)
        reasons = [s.swap.reason for s in arbiter.swaps]
        assert reasons.count("fallback") >= 1
        assert all(s.swap.winner == A for s in arbiter.swaps if s.swap.reason == "fallback")
        assert arbiter.holders("g") == [A]
        found = samples((await h.client.get("/metrics")).text)
        fallbacks = found[
            ("flexinfer_controller_gpu_swaps_total", (("group", "g"), ("reason", "fallback")))
        ]
        assert fallbacks == reasons.count("fallback")
