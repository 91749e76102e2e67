"""GPU sharing end to end (issue 13): the openai SDK through the real proxy, the controller's
local runtime running the real reference engine on a declared 1-GPU inventory, with the
arbiter on. Two Models of one ``gpu.shared`` group do not fit on the GPU together; requests
alternate between them, so every request after the first swaps the GPU.

Checked on every poll of a watcher that runs beside the requests: never more engine
processes, runtime replicas or Resident Models than the GPU's memory fits. At the end:
every request was answered, and answered right (greedy decoding: the same text as the
model's first answer), and each Model went Ready, Preempted, Ready in that order.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import openai
import psutil
import pytest

from flexinfer_common.bus.memory import MemoryBus
from flexinfer_common.settings import StoreSettings
from flexinfer_common.store import ModelStore, create_store
from flexinfer_controller.core.controller import Controller
from flexinfer_controller.core.sharing.arbiter import SharedArbiter
from flexinfer_controller.runtime.local import REPLICA_ID_ENV, runtime_id
from flexinfer_controller.testing import (
    Harness,
    kill_engines,
    marked_pids,
    model_doc,
    run_controller,
)
from flexinfer_proxy.app import create_app
from flexinfer_proxy.serve import serve_proxy_in_background
from flexinfer_proxy.settings import ProxySettings

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(300)]

GPU_MB = 24 * 1024
GPU = [{"vendor": "nvidia", "count": 1, "arch": "sm_90", "vram": "24Gi", "node": "n1"}]
"""The declared inventory: one 24 GiB GPU (``./dev up --gpus "1x nvidia sm_90 24GiB"``)."""
ESTIMATE_MB = 16000
"""Each Model's gpu.vramEstimateMB: two do not fit on the GPU together."""
BUDGET = GPU_MB // ESTIMATE_MB
"""How many of the Models' engines the GPU holds at once (1)."""
WINDOW_S = 1.5
"""The demand window (settings): a holder without demand this long yields the GPU."""
SHARING = {"mode": "arbiter", "demand_window_s": WINDOW_S, "swap_cooldown_s": 600.0}
"""The settings' cooldown is kept long: each Model's own ``swapCooldown`` (1 s) must win."""
NAMES = ("a", "b")
KEYS = tuple(f"default/{n}" for n in NAMES)


def shared_doc(name: str, source: str) -> dict[str, Any]:
    """A member of group ``g`` with a short swap cooldown of its own."""
    doc = model_doc(name, source, idle_timeout="300s", coldStartTimeout="120s")
    doc["spec"]["gpu"] = {
        "vendor": "nvidia",
        "shared": "g",
        "vramEstimateMB": ESTIMATE_MB,
        "swapCooldown": "1s",
    }
    return doc


def engine_replicas(tmp_path: Path) -> set[str]:
    """The replica ids of the engine processes alive now (children carry the id too)."""
    found = set()
    for pid in marked_pids(runtime_id(tmp_path / "data")):
        try:
            found.add(psutil.Process(pid).environ()[REPLICA_ID_ENV])
        except (psutil.Error, KeyError):
            continue
    return found


@dataclass
class Watcher:
    """Polls the store, the runtime and the processes; records phases and every excess."""

    store: ModelStore
    controller: Controller
    tmp_path: Path
    phases: dict[str, list[str]] = field(default_factory=lambda: {n: [] for n in NAMES})
    excess: list[str] = field(default_factory=list)
    polls: int = 0

    async def poll(self) -> None:
        """One observation of everything that could exceed the budget."""
        self.polls += 1
        resident = []
        for name in NAMES:
            model = await self.store.get_model("default", name)
            if model.status.observed_generation != model.metadata.generation:
                continue  # not reconciled yet: its status says nothing about this spec
            seen = self.phases[name]
            if not seen or seen[-1] != model.status.phase:
                seen.append(model.status.phase.value)
            if model.status.residency == "Resident":
                resident.append(name)
        replicas = {r.model for r in self.controller.runtime.list() if r.model in KEYS}
        processes = engine_replicas(self.tmp_path)
        for what, count in (("Resident", resident), ("replicas", replicas),
                            ("engines", processes)):  # fmt: skip
            if len(count) > BUDGET:
                self.excess.append(f"poll {self.polls}: {what} {sorted(count)}")

    async def run(self) -> None:
        """Poll until cancelled."""
        while True:
            await self.poll()
            await asyncio.sleep(0.05)  # the polling interval, not a wait for an outcome


@contextlib.asynccontextmanager
async def stack(tmp_path: Path) -> AsyncIterator[tuple[str, Harness, Watcher]]:
    """Proxy and controller on one bus and store: (proxy URL, controller, watcher)."""
    bus = MemoryBus()
    store = create_store(StoreSettings(url=f"sqlite:///{tmp_path / 'store.db'}"))
    # Demand repeats well within the window, as a waiting queue must to stay live.
    proxy_settings = ProxySettings(port=0, instance_id="e2e", demand_resend_interval_s=0.3)
    proxy = create_app(proxy_settings, bus=bus, store=store)
    try:
        async with (
            run_controller(
                tmp_path, store=store, bus=bus, gpus=GPU, gpu_sharing=SHARING,
                engine_python=sys.executable, engine_startup_timeout_s=120.0,
            ) as h,
            serve_proxy_in_background(proxy) as url,
        ):  # fmt: skip
            watcher = Watcher(store, h.app.state.controller, tmp_path)
            yield url, h, watcher
    finally:
        await bus.close()
        await store.close()
        assert kill_engines(tmp_path) == [], "a test left engines running"


def in_order(seen: list[str], wanted: list[str]) -> bool:
    """Whether ``wanted`` is a subsequence of ``seen``."""
    rest = iter(seen)
    return all(phase in rest for phase in wanted)


async def ask(sdk: openai.AsyncOpenAI, model: str) -> str:
    """One chat request, greedy; the reply's text (the engine answered as ``model``)."""
    reply = await sdk.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Which model holds the GPU?"}],
        temperature=0,
        max_tokens=8,
        timeout=120,
    )
    assert reply.model == model
    content = reply.choices[0].message.content
    assert content
    return content


async def test_alternating_requests_swap_the_gpu_and_none_is_lost(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    async with stack(tmp_path) as (url, h, watcher):
        for name in NAMES:
            await h.put_model(shared_doc(name, tiny_model_dir.as_uri()))
        poller = asyncio.create_task(watcher.run())
        answers: dict[str, list[str]] = {n: [] for n in NAMES}
        try:
            sdk = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
            async with sdk:
                for name in ("a", "b", "a", "b"):
                    answers[name].append(await ask(sdk, name))
                # Both at once: one waits in the proxy's queue while the other holds the GPU.
                both = await asyncio.gather(ask(sdk, "a"), ask(sdk, "b"))
                answers["a"].append(both[0])
                answers["b"].append(both[1])
            await watcher.poll()
            arbiter = h.app.state.controller.shared_gpu
            assert isinstance(arbiter, SharedArbiter)
            winners = [s.swap.winner for s in arbiter.swaps]
        finally:
            poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await poller

    assert watcher.excess == [], watcher.excess
    # b, a, b took the GPU from the other; then the pair at once swapped it once more.
    assert winners[:3] == ["default/b", "default/a", "default/b"], winners
    assert len(winners) == 4, winners
    assert watcher.polls > 20, watcher.polls
    for name in NAMES:
        # The same tiny model behind both names: greedy decoding writes the same text.
        assert answers[name] == [answers["a"][0]] * 3, answers
        seen = watcher.phases[name]
        assert in_order(seen, ["Ready", "Preempted", "Ready"]), (name, seen)


async def test_an_unload_frees_the_gpu_and_the_next_request_brings_the_model_back(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    async with stack(tmp_path) as (url, h, watcher):
        for name in NAMES:
            await h.put_model(shared_doc(name, tiny_model_dir.as_uri()))
        arbiter = h.app.state.controller.shared_gpu
        assert isinstance(arbiter, SharedArbiter)
        sdk = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
        async with sdk:
            first = await ask(sdk, "a")
            unloaded = await h.client.post("/v1/admin/models/a/unload")
            assert unloaded.status_code == 200, unloaded.text
            assert unloaded.json()["status"]["residency"] == "Stopped"
            assert engine_replicas(tmp_path) == set()
            assert arbiter.holders("g") == []  # a left the GPU: nothing to swap for b

            assert await ask(sdk, "b") == first
            assert list(arbiter.swaps) == []  # b took a free GPU
            await watcher.poll()
            assert watcher.phases["b"][-1] == "Ready"
            # a's next request after the unload brings it back (by a swap: b is idle).
            assert await ask(sdk, "a") == first
            assert [s.swap.winner for s in arbiter.swaps] == ["default/a"]
            await watcher.poll()
    assert watcher.excess == [], watcher.excess
