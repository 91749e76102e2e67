"""LoRA adapters end to end: the openai SDK against the proxy, and the controller (local
runtime) loading adapters into the engines it runs, both sharing one bus and one store.

* With the vLLM stand-in on PATH: a request for an adapter that is not preloaded waits in
  the proxy's cold-start queue; its demand names the adapter, so the controller starts
  the Model from zero and loads the adapter, and the proxy forwards the request once the
  adapter's status says Loaded.
* With the real reference engine: a generated PEFT adapter, preloaded, really changes
  what the model writes; a path outside the adapter roots is refused before any engine is
  asked; a delete unloads it from the engine and releases the finalizer.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from flexinfer_common.api import LoRAAdapter
from flexinfer_common.bus.memory import MemoryBus
from flexinfer_common.errors import NotFoundError
from flexinfer_common.settings import StoreSettings
from flexinfer_common.store import ModelStore, create_store
from flexinfer_controller.testing import (
    Harness,
    eventually,
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


@contextlib.asynccontextmanager
async def running_stack(tmp_path: Path, **controller: Any) -> AsyncIterator[Stack]:
    """The controller (``controller``: its settings) and the proxy on one bus and store;
    every adapter lies in ``tmp_path / "adapters"``, the one adapter root."""
    bus = MemoryBus()
    store = create_store(StoreSettings(url=f"sqlite:///{tmp_path / 'store.db'}"))
    proxy = create_app(ProxySettings(port=0, instance_id="e2e"), bus=bus, store=store)
    roots = [tmp_path / "adapters"]
    try:
        async with (
            run_controller(tmp_path, store=store, bus=bus, lora_roots=roots, **controller) as h,
            serve_proxy_in_background(proxy) as url,
        ):
            yield Stack(h, url, store)
    finally:
        await bus.close()
        await store.close()
        assert kill_engines(tmp_path) == [], "a test left engines running"


@pytest.fixture
async def stack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Stack]:
    """The stack with the vLLM stand-in on PATH and a declared GPU."""
    standins = install_standins(tmp_path / "standins")
    monkeypatch.setenv("PATH", f"{standins.bin_dir}{os.pathsep}{os.environ['PATH']}")
    async with running_stack(tmp_path, gpus=[GPU]) as found:
        yield found


@pytest.fixture
async def reference(tmp_path: Path) -> AsyncIterator[Stack]:
    """The stack running the real reference engine (``python -m flexinfer_engine``)."""
    async with running_stack(
        tmp_path, engine_python=sys.executable, engine_startup_timeout_s=120.0
    ) as found:
        yield found


def lora_doc(name: str, adapter_name: str, uri: str, **spec: Any) -> dict[str, Any]:
    """A LoRAAdapter on Model ``base`` with a LocalPath source."""
    return {
        "apiVersion": "ai.flexinfer/v1alpha2",
        "kind": "LoRAAdapter",
        "metadata": {"name": name},
        "spec": {
            "modelRef": "base",
            "adapterName": adapter_name,
            "source": {"type": "LocalPath", "uri": uri},
            **spec,
        },
    }


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
    doc = lora_doc("sql", "sql-lora", str(adapter))
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

    # The reply came once the replica's endpoint said it holds the adapter; the adapter's
    # status is written by the same pass of the loop, a moment later.
    await adapter_phase(stack.store, "sql", "Loaded")
    model = await stack.store.get_model("default", "base")
    assert model.status.endpoint is not None
    async with httpx.AsyncClient(base_url=model.status.endpoint, trust_env=False) as client:
        cards = (await client.get("/v1/models")).json()["data"]
    assert [c["id"] for c in cards if c["parent"]] == ["sql-lora"]


def engine_cli(*args: str) -> None:
    """``python -m flexinfer_engine ARGS`` (generate a model or an adapter)."""
    subprocess.run(
        [sys.executable, "-m", "flexinfer_engine", *args], check=True, capture_output=True,
        timeout=120,
    )  # fmt: skip


async def greedy(sdk: openai.AsyncOpenAI, model: str) -> str:
    """What ``model`` writes for a fixed prompt with greedy decoding."""
    reply = await sdk.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Tell me about adapters."}],
        temperature=0,
        max_tokens=16,
        timeout=60,
    )
    assert reply.model == model  # the engine answered as the model asked for
    content = reply.choices[0].message.content
    assert content
    return content


async def adapter_phase(store: ModelStore, name: str, phase: str) -> LoRAAdapter:
    """The adapter once its status says ``phase`` (AssertionError with the last status)."""
    found: list[LoRAAdapter] = []

    async def check() -> bool:
        found[:] = [await store.get_adapter("default", name)]
        return found[0].status.phase.value == phase

    try:
        await eventually(check, timeout_s=60)
    except AssertionError:
        raise AssertionError(f"{name} never {phase}: {found and found[0].status}") from None
    return found[0]


async def engine_adapters(url: str) -> dict[str, str]:
    """What the engine at ``url`` holds: adapter name -> path (its /v1/models cards)."""
    async with httpx.AsyncClient(base_url=url, timeout=10, trust_env=False) as client:
        cards = (await client.get("/v1/models")).json()["data"]
    return {c["id"]: c["root"] for c in cards if c.get("parent")}


@pytest.mark.slow
async def test_a_generated_adapter_changes_what_the_reference_engine_writes(
    reference: Stack, tmp_path: Path
) -> None:
    model_dir = tmp_path / "tiny"
    engine_cli("generate", "tiny", "--out", str(model_dir), "--preset", "tiny")
    sql = tmp_path / "adapters" / "sql"
    # alpha / r = 8: strong enough that greedy decoding picks other tokens.
    engine_cli("generate-adapter", "sql", "--model-dir", str(model_dir), "--out", str(sql),
               "--rank", "8", "--alpha", "64")  # fmt: skip
    controller = reference.controller
    await controller.put_model(model_doc("base", model_dir.as_uri(), minReplicas=1))
    created = await controller.client.post(
        "/v1/admin/loraadapters", json=lora_doc("sql", "sql-lora", str(sql), preload=True)
    )
    assert created.status_code == 201, created.text
    loaded = await adapter_phase(reference.store, "sql", "Loaded")
    assert (loaded.status.loaded_replicas, loaded.status.total_replicas) == (1, 1)
    assert loaded.metadata.finalizers == ["flexinfer.ai/lora-cleanup"]
    model = await reference.store.get_model("default", "base")
    assert model.status.endpoint is not None
    assert await engine_adapters(model.status.endpoint) == {"sql-lora": str(sql)}

    sdk = openai.AsyncOpenAI(base_url=f"{reference.proxy}/v1", api_key="unused", max_retries=0)
    async with sdk:
        base_text = await greedy(sdk, "base")
        adapted = await greedy(sdk, "sql-lora")
        assert adapted != base_text, "the adapter changed nothing the model wrote"
        assert await greedy(sdk, "sql-lora") == adapted  # greedy: the same every time

    # Outside the roots: refused before any engine is asked, naming the setting.
    stray = tmp_path / "elsewhere" / "stray"
    engine_cli("generate-adapter", "stray", "--model-dir", str(model_dir), "--out", str(stray))
    doc = lora_doc("stray", "stray-lora", str(stray), preload=True)
    assert (await controller.client.post("/v1/admin/loraadapters", json=doc)).status_code == 201
    failed = await adapter_phase(reference.store, "stray", "Failed")
    assert "FLEXINFER_CONTROLLER_LORA_ROOTS" in (failed.status.message or "")
    assert "stray-lora" not in await engine_adapters(model.status.endpoint)

    # Deleted: unloaded from the engine, then the finalizer goes and the adapter with it.
    assert (await controller.client.delete("/v1/admin/loraadapters/sql")).status_code == 204

    async def gone() -> bool:
        try:
            await reference.store.get_adapter("default", "sql")
        except NotFoundError:
            return True
        return False

    await eventually(gone, timeout_s=30)
    assert "sql-lora" not in await engine_adapters(model.status.endpoint)
    assert (await controller.client.delete("/v1/admin/models/base")).status_code == 204
