"""A LoRA adapter loaded on its first request, end to end: the openai SDK against the proxy,
the controller (local runtime) starting the base Model from zero with the vLLM stand-in on
PATH and loading the adapter into it, both sharing one bus and one store.

The request for the adapter waits in the proxy's cold-start queue; its demand names the
adapter, so the controller starts the Model and loads the adapter, and the proxy forwards
the request once the adapter's status says Loaded.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai
import pytest

from flexinfer_common.bus.memory import MemoryBus
from flexinfer_common.settings import StoreSettings
from flexinfer_common.store import ModelStore, create_store
from flexinfer_controller.testing import (
    Harness,
    fake_model_dir,
    kill_engines,
    model_doc,
    run_controller,
)
from flexinfer_proxy.app import create_app
from flexinfer_proxy.serve import serve_proxy_in_background
from flexinfer_proxy.settings import ProxySettings
from flexinfer_testing.backend_servers import install_standins

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

GPU = {"vendor": "nvidia", "count": 1, "arch": "sm_89", "vram": "24Gi"}


@dataclass
class Stack:
    """The controller harness and the proxy's base URL."""

    controller: Harness
    proxy: str
    store: ModelStore


@pytest.fixture
async def stack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Stack]:
    standins = install_standins(tmp_path / "standins")
    monkeypatch.setenv("PATH", f"{standins.bin_dir}{os.pathsep}{os.environ['PATH']}")
    bus = MemoryBus()
    store = create_store(StoreSettings(url=f"sqlite:///{tmp_path / 'store.db'}"))
    proxy = create_app(ProxySettings(port=0, instance_id="e2e"), bus=bus, store=store)
    try:
        async with (
            run_controller(tmp_path, store=store, bus=bus, gpus=[GPU]) as controller,
            serve_proxy_in_background(proxy) as url,
        ):
            yield Stack(controller, url, store)
    finally:
        await bus.close()
        await store.close()
        assert kill_engines(tmp_path) == [], "a test left engines running"


async def test_the_first_request_for_an_adapter_starts_the_model_and_loads_it(
    stack: Stack, tmp_path: Path
) -> None:
    base = model_doc("base", fake_model_dir(tmp_path / "m").as_uri(), backend="vllm")
    base["spec"]["config"] = {"enableLora": True}
    base["spec"]["gpu"] = {"vendor": "auto"}
    await stack.controller.put_model(base)
    adapter = tmp_path / "adapters" / "sql"
    adapter.mkdir(parents=True)
    (adapter / "adapter_config.json").write_text(json.dumps({"r": 8}))
    doc = {
        "apiVersion": "ai.flexinfer/v1alpha2",
        "kind": "LoRAAdapter",
        "metadata": {"name": "sql"},
        "spec": {
            "modelRef": "base",
            "adapterName": "sql-lora",
            "source": {"type": "LocalPath", "uri": str(adapter)},
        },
    }
    created = await stack.controller.client.post("/v1/admin/loraadapters", json=doc)
    assert created.status_code == 201, created.text
    idle = await stack.controller.wait_phase("base", "Idle", timeout_s=15)
    assert idle.status.endpoint is None  # scaled to zero: nothing runs before the request

    sdk = openai.AsyncOpenAI(base_url=f"{stack.proxy}/v1", api_key="unused", max_retries=0)
    async with sdk:
        reply = await sdk.chat.completions.create(
            model="sql-lora", messages=[{"role": "user", "content": "hi"}], timeout=60
        )
    assert reply.model == "sql-lora"  # the engine answered as the adapter

    loaded = await stack.store.get_adapter("default", "sql")
    assert loaded.status.phase.value == "Loaded"
    model = await stack.store.get_model("default", "base")
    assert model.status.endpoint is not None
    async with httpx.AsyncClient(base_url=model.status.endpoint, trust_env=False) as client:
        cards = (await client.get("/v1/models")).json()["data"]
    assert [c["id"] for c in cards if c["parent"]] == ["sql-lora"]
