"""GPU sharing wired into the running controller (core/sharing/wiring.py, create_app's
``gpu_sharing.mode``): two reference-engine Models of one shared group on one declared GPU
take turns by demand, and their engines never run side by side."""

from __future__ import annotations

import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from flexinfer_common.api import Model
from flexinfer_common.bus import topics
from flexinfer_common.errors import NotFoundError
from flexinfer_common.settings import StoreSettings
from flexinfer_common.store import create_store
from flexinfer_controller.app import create_shared_gpu
from flexinfer_controller.core.controller import Controller
from flexinfer_controller.core.sharing import NoSharing
from flexinfer_controller.core.sharing.arbiter import SharedArbiter
from flexinfer_controller.core.sharing.wiring import store_members
from flexinfer_controller.runtime.local import REPLICA_ID_ENV, runtime_id
from flexinfer_controller.settings import ControllerSettings
from flexinfer_controller.testing import (
    Harness,
    demand,
    eventually,
    kill_engines,
    marked_pids,
    model_doc,
    run_controller,
)

GPU = [{"vendor": "nvidia", "arch": "sm_89", "vram": "24Gi", "node": "n1"}]
"""One 24 GiB GPU: two 16000 MB estimates do not fit on it together."""
WINDOW_S = 2.0
"""The arbiter's demand window: a holder without demand this long yields the GPU."""
SHARING = {"mode": "arbiter", "demand_window_s": WINDOW_S, "swap_cooldown_s": 600.0}
"""The default cooldown is kept long: each Model's own ``swapCooldown`` (1 s) must win."""
A, B = "default/a", "default/b"


@pytest.fixture
def model_dir(tmp_path: Path, tiny_model_dir: Path) -> Iterator[Path]:
    """The session's tiny model (engines only read it); no engine may outlive the test."""
    yield tiny_model_dir
    assert kill_engines(tmp_path) == [], "a test left engines running"


def shared_doc(name: str, source: str) -> dict[str, Any]:
    doc = model_doc(name, source, idle_timeout="300s")
    gpu = {"vendor": "nvidia", "shared": "g", "vramEstimateMB": 16000, "swapCooldown": "1s"}
    doc["spec"]["gpu"] = gpu
    return doc


def engines(tmp_path: Path) -> set[str]:
    """The replica ids of the engine processes running now (children carry their id too)."""
    found = set()
    for pid in marked_pids(runtime_id(tmp_path / "data")):
        try:
            found.add(psutil.Process(pid).environ()[REPLICA_ID_ENV])
        except (psutil.Error, KeyError):
            continue
    return found


class Watch:
    """Polls the controller and checks at every step that one engine at most runs."""

    def __init__(self, h: Harness, tmp_path: Path) -> None:
        self.h = h
        self.tmp_path = tmp_path
        self.controller: Controller = h.app.state.controller
        self.models: dict[str, Model] = {}
        self.steps = 0

    async def step(self) -> None:
        """One observation: the stored Models, the runtime's replicas, the processes."""
        self.steps += 1
        for key in (A, B):
            try:
                self.models[key] = await self.h.store.get_model("default", key.split("/")[1])
            except NotFoundError:
                self.models.pop(key, None)
        running = {r.model for r in self.controller.runtime.list()}
        assert running <= {A} or running <= {B}, f"both Models have replicas: {running}"
        assert len(engines(self.tmp_path)) <= 1, "two engines run on the one GPU"

    def phase(self, key: str) -> str:
        model = self.models.get(key)
        if model is None:
            return ""
        done = model.status.observed_generation == model.metadata.generation
        return model.status.phase if done else ""

    async def until(
        self, check: Callable[[], bool], tick: Callable[[], Awaitable[None]] | None = None
    ) -> None:
        """Step until ``check`` holds, awaiting ``tick`` (a proxy's resend) before each."""

        async def observed() -> bool:
            if tick is not None:
                await tick()
            await self.step()
            return check()

        try:
            await eventually(observed, timeout_s=120.0, interval_s=0.05)
        except AssertionError as exc:
            told = {k: m.status.model_dump(mode="json") for k, m in self.models.items()}
            raise AssertionError(f"{exc}; last statuses {told}") from None


class Proxy:
    """A proxy holding requests for one Model: it repeats its DemandEvent while they wait."""

    def __init__(self, h: Harness, key: str) -> None:
        self.h = h
        self.key = key
        self.last = 0.0
        """When it last reported the queue (monotonic seconds)."""

    async def resend(self) -> None:
        """Report the queue again when a quarter window passed: it stays live."""
        if time.monotonic() - self.last >= WINDOW_S / 4:
            self.last = time.monotonic()  # before: the controller hears it later, not sooner
            await self.h.publish(topics.DEMAND, demand(self.key))


def waiting_for_gpu(model: Model) -> bool:
    """Pending, queued for the GPU its group holds (not merely unplaced)."""
    return model.status.phase == "Pending" and loaded(model)[1] == "WaitingForGPU"


def loaded(model: Model) -> tuple[str, str, str]:
    cond = {c.type: c for c in model.status.conditions}["Loaded"]
    return cond.status, cond.reason, cond.message


async def test_demand_swaps_the_gpu_after_the_window(tmp_path: Path, model_dir: Path) -> None:
    source = model_dir.as_uri()
    async with run_controller(
        tmp_path, gpus=GPU, engine_python=sys.executable, gpu_sharing=SHARING
    ) as h:
        watch = Watch(h, tmp_path)
        arbiter = watch.controller.shared_gpu
        assert isinstance(arbiter, SharedArbiter)
        for name in ("a", "b"):
            await h.put_model(shared_doc(name, source))
        await watch.until(lambda: watch.phase(A) == watch.phase(B) == "Idle")

        await h.publish(topics.DEMAND, demand(A))
        await watch.until(lambda: watch.phase(A) == "Ready")
        assert arbiter.holders("g") == [A]

        # Both queue: a, busy, keeps the GPU from b of equal priority, which waits for it.
        a_proxy, b_proxy = Proxy(h, A), Proxy(h, B)

        async def both() -> None:
            await a_proxy.resend()
            await b_proxy.resend()

        await watch.until(lambda: waiting_for_gpu(watch.models[B]), both)
        assert watch.phase(A) == "Ready"
        assert arbiter.holders("g") == [A]
        assert not arbiter.swaps

        # a's queue empties: a window later it is idle, and b takes the GPU.
        await watch.until(
            lambda: watch.phase(A) == "Preempted" and watch.phase(B) == "Ready", b_proxy.resend
        )
        swap = arbiter.swaps[-1]
        assert (swap.group, swap.swap.winner, swap.swap.losers) == ("g", B, (A,))
        assert swap.swap.reason == "idle"  # equal priorities: only an idle holder yields
        assert swap.swap.at - a_proxy.last > WINDOW_S
        a, b = watch.models[A], watch.models[B]
        assert loaded(a)[:2] == ("False", "Preempted")
        assert "preempted by default/b" in loaded(a)[2]
        assert a.status.message == loaded(a)[2]
        assert (a.status.desired_replicas, a.status.replicas) == (0, 0)
        assert loaded(b)[1] == "BackendReady"
        assert (b.status.ready_replicas, b.status.message) == (1, None)
        assert arbiter.holders("g") == [B]
        assert {r.model for r in watch.controller.runtime.list()} == {B}

        # b is deleted: a, still wanting its replica, gets the GPU back without new demand.
        assert (await h.client.delete("/v1/admin/models/b")).status_code == 204
        await watch.until(lambda: B not in watch.models and watch.phase(A) == "Ready")
        assert arbiter.holders("g") == [A]


async def test_store_members_are_a_groups_live_models(tmp_path: Path) -> None:
    store = create_store(StoreSettings(url=f"sqlite:///{tmp_path / 'store.db'}"))
    try:
        for name, group in (("a", "g"), ("b", "g"), ("c", "other"), ("d", None)):
            doc = model_doc(name, "file:///m")
            doc["metadata"]["namespace"] = "default"
            if group is not None:
                doc["spec"]["gpu"] = {"shared": group}
            await store.create_model(Model.model_validate(doc))
        members = store_members(store)
        assert [m.key for m in await members("g")] == [A, B]
        assert [m.key for m in await members("other")] == ["default/c"]
        assert await members("none") == []
    finally:
        await store.close()


async def test_sharing_is_off_unless_the_setting_turns_the_arbiter_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = create_store(StoreSettings(url=f"sqlite:///{tmp_path / 'store.db'}"))
    requeued: list[str] = []
    try:
        await _check_modes(store, requeued, monkeypatch)
    finally:
        await store.close()


async def _check_modes(store: Any, requeued: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    assert isinstance(create_shared_gpu(ControllerSettings(), store, requeued.append), NoSharing)
    monkeypatch.setenv("FLEXINFER_CONTROLLER_GPU_SHARING_MODE", "arbiter")
    monkeypatch.setenv("FLEXINFER_CONTROLLER_GPU_SHARING_DEMAND_WINDOW_S", "7")
    hook = create_shared_gpu(ControllerSettings(), store, requeued.append)
    assert isinstance(hook, SharedArbiter)
    assert (hook.policy.name, hook.policy.demand_window_s) == ("shared", 7.0)
    monkeypatch.setenv("FLEXINFER_CONTROLLER_GPU_SHARING_MODE", "sometimes")
    with pytest.raises(ValueError, match="mode"):
        ControllerSettings()
