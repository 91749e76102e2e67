"""Scale-out by concurrency end to end: the openai SDK through the real proxy, the
controller's local runtime running the real reference engine. A Model with maxReplicas 2
and targetConcurrency 1 under a sustained load of three looping clients gets a second
replica, which serves; every request succeeds throughout; once the load stops the count
goes back to one (the idle rule's floor while the Model is still active).

The windows are short (settings) so that the test takes seconds, not minutes; the decision
is the same as with the defaults (see test_controller_scaleout.py for those).
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import httpx
import openai
import pytest

from flexinfer_common.bus.memory import MemoryBus
from flexinfer_common.settings import StoreSettings
from flexinfer_common.store import create_store
from flexinfer_controller.runtime import Replica, ReplicaState
from flexinfer_controller.testing import eventually, kill_engines, model_doc, run_controller
from flexinfer_proxy.app import create_app
from flexinfer_proxy.serve import serve_proxy_in_background
from flexinfer_proxy.settings import ProxySettings
from flexinfer_testing.scrape import parse_metrics, sample_value, scrape

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(300)]

KEY = "default/m"
SCALEOUT = {
    "tick_s": 0.2,
    "stable_window_s": 3.0,
    "panic_window_s": 1.0,
    "scale_down_delay_s": 2.0,
}
CLIENTS = 3
"""Looping clients: about 3 requests in flight against a target of 1 per replica."""


async def ask(sdk: openai.AsyncOpenAI) -> str:
    """One greedy chat request; its text."""
    reply = await sdk.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "Count to ten, slowly."}],
        temperature=0,
        max_tokens=24,
        timeout=120,
    )
    content = reply.choices[0].message.content
    assert content
    return content


async def tokens_of(url: str) -> float:
    """Tokens the engine at ``url`` generated so far."""
    async with httpx.AsyncClient(timeout=5) as client:
        response = await client.get(f"{url.rstrip('/')}/metrics")
    value = sample_value(parse_metrics(response.text), "flexinfer_engine_generated_tokens_total")
    return value or 0.0


async def test_a_sustained_load_adds_a_replica_and_it_goes_back_after(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    bus = MemoryBus()
    store = create_store(StoreSettings(url=f"sqlite:///{tmp_path / 'store.db'}"))
    proxy = create_app(ProxySettings(port=0, instance_id="e2e"), bus=bus, store=store)
    answers: list[str] = []
    try:
        async with (
            run_controller(
                tmp_path, store=store, bus=bus, scaleout=SCALEOUT,
                engine_python=sys.executable, engine_startup_timeout_s=120.0,
            ) as h,
            serve_proxy_in_background(proxy) as url,
        ):  # fmt: skip
            runtime = h.app.state.controller.runtime
            doc = model_doc(
                "m", tiny_model_dir.as_uri(), maxReplicas=2, targetConcurrency=1,
                coldStartTimeout="120s",
            )  # fmt: skip
            await h.put_model(doc)
            sdk = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
            async with sdk:
                first = await ask(sdk)  # the cold start: one replica
                assert len(runtime.list(KEY)) == 1
                stop = asyncio.Event()

                async def client() -> None:
                    while not stop.is_set():
                        answers.append(await ask(sdk))

                clients = [asyncio.create_task(client()) for _ in range(CLIENTS)]

                def ready() -> list[Replica]:
                    return [r for r in runtime.list(KEY) if r.state is ReplicaState.READY]

                try:
                    await eventually(lambda: len(ready()) == 2, timeout_s=180, interval_s=0.1)
                    newest = max(ready(), key=lambda r: r.ready_at or 0.0)
                    assert newest.url
                    before = await tokens_of(newest.url)

                    async def second_serves() -> bool:
                        assert newest.url
                        return await tokens_of(newest.url) > before

                    await eventually(second_serves, timeout_s=60, interval_s=0.1)
                    metrics = await scrape(h.client)
                    wanted = "flexinfer_controller_scaling_desired_replicas"
                    assert sample_value(metrics, wanted, model=KEY) == 2
                    assert (sample_value(metrics, "flexinfer_controller_scaling_concurrency",
                                         model=KEY) or 0) > 1  # fmt: skip
                    model = await store.get_model("default", "m")
                    assert model.status.desired_replicas == 2
                    scaling = model.status.autoscaling
                    assert scaling is not None
                    assert scaling.target_concurrency == 1
                    assert scaling.reason in ("AtMaxReplicas", "Panic", "Stable"), scaling
                finally:
                    stop.set()
                    # A failed request raises here: every request must succeed throughout.
                    await asyncio.gather(*clients)
                # Down to the idle rule's floor (still active): after the delay, not at once.
                await eventually(lambda: len(runtime.list(KEY)) == 1, timeout_s=60, interval_s=0.1)

                async def settled() -> bool:
                    stored = await store.get_model("default", "m")
                    return stored.status.desired_replicas == 1 and stored.status.replicas == 1

                await eventually(settled, timeout_s=30, interval_s=0.1)
                assert await ask(sdk) == first  # the remaining replica still serves
    finally:
        await bus.close()
        await store.close()
        assert kill_engines(tmp_path) == [], "a test left engines running"
    assert answers
    assert all(a == first for a in answers), set(answers)
