"""LoRAAdapters loaded into real engines by the local controller: the vLLM stand-in on PATH
(it parses vLLM's CLI and serves vLLM's runtime LoRA routes) run by the local runtime.

Each test asks the engine itself what it holds (GET /v1/models), so what is checked is
what an engine serves, not what the controller believes.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from flexinfer_common.api import LoRAAdapter
from flexinfer_common.bus import topics
from flexinfer_common.errors import NotFoundError
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
from flexinfer_testing.backend_servers import StandIns, install_standins

GPU = {"vendor": "nvidia", "count": 1, "arch": "sm_89", "vram": "24Gi"}


@pytest.fixture
def standins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[StandIns]:
    """The stand-ins, ``vllm`` first on PATH; no engine outlives the test."""
    found = install_standins(tmp_path / "standins")
    monkeypatch.setenv("PATH", f"{found.bin_dir}{os.pathsep}{os.environ['PATH']}")
    yield found
    assert kill_engines(tmp_path) == [], "a test left engines running"


@pytest.fixture
async def h(tmp_path: Path, standins: StandIns) -> AsyncIterator[Harness]:
    """The local controller with a declared GPU, a fast adapter resync, and the test's
    ``adapters`` directory as the one adapter root."""
    async with run_controller(
        tmp_path, gpus=[GPU], lora_resync_interval_s=0.5, lora_roots=[tmp_path / "adapters"]
    ) as harness:
        yield harness


def adapter_dir(root: Path, name: str, rank: int = 8) -> Path:
    """A PEFT adapter directory as vLLM reads it (adapter_config.json; rank ``r``)."""
    root.mkdir(parents=True, exist_ok=True)
    path = root / name
    path.mkdir()
    (path / "adapter_config.json").write_text(json.dumps({"r": rank, "peft_type": "LORA"}))
    return path


def lora_doc(name: str, uri: str, *, preload: bool = True, model: str = "base") -> dict[str, Any]:
    """A LoRAAdapter ``name`` (adapterName ``<name>-lora``) on Model ``model``."""
    return {
        "apiVersion": "ai.flexinfer/v1alpha2",
        "kind": "LoRAAdapter",
        "metadata": {"name": name},
        "spec": {
            "modelRef": model,
            "adapterName": f"{name}-lora",
            "source": {"type": "LocalPath", "uri": uri},
            "preload": preload,
        },
    }


async def serve_base(h: Harness, tmp_path: Path, config: dict[str, Any] | None = None) -> str:
    """The vLLM Model ``base`` (one warm replica) Ready; its endpoint."""
    doc = model_doc("base", fake_model_dir(tmp_path / "m").as_uri(), backend="vllm", minReplicas=1)
    doc["spec"]["config"] = {"enableLora": True} if config is None else config
    doc["spec"]["gpu"] = {"vendor": "auto"}
    await h.put_model(doc)
    ready = await h.wait_phase("base", "Ready", timeout_s=30)
    assert ready.status.endpoint is not None
    return ready.status.endpoint


async def apply(h: Harness, doc: dict[str, Any]) -> None:
    response = await h.client.put(f"/v1/admin/loraadapters/{doc['metadata']['name']}", json=doc)
    assert response.status_code in (200, 201), response.text


async def held(url: str) -> dict[str, str]:
    """What the engine at ``url`` holds: adapter name -> path (its /v1/models cards)."""
    async with httpx.AsyncClient(base_url=url, timeout=5, trust_env=False) as client:
        cards = (await client.get("/v1/models")).json()["data"]
    return {c["id"]: c["root"] for c in cards if c["parent"]}


async def reaches(h: Harness, name: str, phase: str, timeout_s: float = 20) -> LoRAAdapter:
    """The adapter once its status of the current generation says ``phase``."""
    found: list[LoRAAdapter] = []

    async def check() -> bool:
        adapter = await h.store.get_adapter("default", name)
        found[:] = [adapter]
        current = any(
            c.type == "Loaded" and c.observed_generation == adapter.metadata.generation
            for c in adapter.status.conditions
        )
        return current and adapter.status.phase.value == phase

    try:
        await eventually(check, timeout_s)
    except AssertionError:
        raise AssertionError(f"{name} never {phase}: {found and found[0].status}") from None
    return found[0]


def reason(adapter: LoRAAdapter) -> str:
    return next(c.reason for c in adapter.status.conditions if c.type == "Loaded")


async def chat(url: str, model: str) -> int:
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
    async with httpx.AsyncClient(base_url=url, timeout=5, trust_env=False) as client:
        return (await client.post("/v1/chat/completions", json=body)).status_code


async def test_preloaded_adapter_is_loaded_served_and_unloaded_on_delete(
    h: Harness, tmp_path: Path
) -> None:
    url = await serve_base(h, tmp_path)
    path = adapter_dir(tmp_path / "adapters", "sql")
    events = h.bus.consumer(topics.ADAPTERS, "lora-test", "t")
    await apply(h, lora_doc("sql", str(path)))
    loaded = await reaches(h, "sql", "Loaded")
    assert (loaded.status.loaded_replicas, loaded.status.total_replicas) == (1, 1)
    assert loaded.metadata.finalizers == ["flexinfer.ai/lora-cleanup"]
    assert await held(url) == {"sql-lora": str(path)}
    assert await chat(url, "sql-lora") == 200
    # The proxies heard of the status change (they release requests waiting for it).
    changes = [topics.AdapterChangedEvent.model_validate(m.payload) for m in await events.fetch()]
    assert ("default/sql", False) in [(e.adapter, e.deleted) for e in changes]

    assert (await h.client.delete("/v1/admin/loraadapters/sql")).status_code == 204

    async def gone() -> bool:
        try:
            await h.store.get_adapter("default", "sql")
        except NotFoundError:
            return True
        return False

    await eventually(gone, timeout_s=10)  # the finalizer went once the engine let it go
    assert await held(url) == {}
    assert await chat(url, "sql-lora") == 404


async def test_endpoints_say_a_replica_holds_an_adapter_only_once_it_does(
    tmp_path: Path, standins: StandIns
) -> None:
    two = {**GPU, "count": 2}
    roots = [tmp_path / "adapters"]
    async with run_controller(
        tmp_path, gpus=[two], lora_resync_interval_s=0.5, lora_roots=roots
    ) as h:
        # The adapter first: each replica is announced as it becomes ready, and the
        # adapter loop loads the adapter into it (a spec change would replace replicas).
        await apply(h, lora_doc("sql", str(adapter_dir(tmp_path / "adapters", "sql"))))
        doc = model_doc("base", fake_model_dir(tmp_path / "m").as_uri(), backend="vllm")
        doc["spec"].update(config={"enableLora": True}, gpu={"vendor": "auto"})
        doc["spec"]["serverless"].update(minReplicas=2, maxReplicas=2)
        await h.put_model(doc)
        # Every event the proxies get: an endpoint that says it holds the adapter does
        # (asked as the event arrives; nothing unloads it here). The second replica is
        # announced before or once it holds it, never as holding it before it does.
        while True:
            event = await h.endpoints_event("default/base", timeout_s=30)
            for endpoint in event.endpoints:
                assert endpoint.adapters is not None, "a vLLM Model's endpoints say"
                if "sql-lora" in endpoint.adapters:
                    assert "sql-lora" in await held(endpoint.url), event
            holding = [e for e in event.endpoints if e.adapters == ["sql-lora"]]
            if len(holding) == 2:
                break


async def test_an_engine_that_restarts_gets_its_adapters_back(h: Harness, tmp_path: Path) -> None:
    url = await serve_base(h, tmp_path)
    path = adapter_dir(tmp_path / "adapters", "sql")
    await apply(h, lora_doc("sql", str(path)))
    await reaches(h, "sql", "Loaded")

    # Lost in place (the engine forgot it, same URL): the next pass asks and reloads it.
    async with httpx.AsyncClient(base_url=url, timeout=5, trust_env=False) as client:
        dropped = await client.post("/v1/unload_lora_adapter", json={"lora_name": "sql-lora"})
    assert dropped.status_code == 200
    await eventually(lambda: _holds(url, "sql-lora"), timeout_s=10)

    # A crashed engine: the runtime starts another (a new URL), which gets it too.
    (pid,) = engine_pids(tmp_path)
    os.kill(pid, signal.SIGKILL)

    async def replaced() -> bool:
        model = await h.store.get_model("default", "base")
        endpoint = model.status.endpoint
        return endpoint not in (None, url) and await _holds(endpoint, "sql-lora")

    await eventually(replaced, timeout_s=30)
    after = await reaches(h, "sql", "Loaded")
    assert (after.status.loaded_replicas, after.status.total_replicas) == (1, 1)


async def _holds(url: str, name: str) -> bool:
    try:
        return name in await held(url)
    except httpx.HTTPError:
        return False


async def test_engine_refusals_fail_the_adapter_with_the_engines_message(
    h: Harness, tmp_path: Path
) -> None:
    url = await serve_base(h, tmp_path)
    wide = adapter_dir(tmp_path / "adapters", "wide", rank=64)  # the engine allows 16
    await apply(h, lora_doc("wide", str(wide)))
    await apply(h, lora_doc("missing", str(tmp_path / "adapters" / "nowhere")))
    failed = await reaches(h, "wide", "Failed")
    assert reason(failed) == "LoadFailed"
    assert "400" in (failed.status.message or "")
    assert "LoRA rank 64 is greater than max_lora_rank 16" in (failed.status.message or "")
    missing = await reaches(h, "missing", "Failed")
    assert "No adapter found for" in (missing.status.message or "")
    assert await held(url) == {}
    # A spec that fits is tried again: the engine allows rank 64 once the Model says so.
    await h.put_model(_with_config(await h.store.get_model("default", "base"), maxLoraRank=64))
    fixed = await reaches(h, "wide", "Loaded", timeout_s=30)
    assert fixed.status.loaded_replicas == 1


async def test_a_path_outside_the_roots_fails_before_the_engine_is_asked(
    h: Harness, tmp_path: Path
) -> None:
    url = await serve_base(h, tmp_path)
    # vLLM checks no path itself (the stand-in would load this one): the controller does.
    outside = adapter_dir(tmp_path / "elsewhere", "sql")
    await apply(h, lora_doc("sql", str(outside)))
    failed = await reaches(h, "sql", "Failed")
    assert reason(failed) == "PathNotAllowed"
    message = failed.status.message or ""
    assert "FLEXINFER_CONTROLLER_LORA_ROOTS" in message
    assert str(tmp_path / "adapters") in message
    cached = {c.type: c for c in failed.status.conditions}["Cached"]
    assert (cached.status, cached.reason) == ("False", "PathNotAllowed")
    assert await held(url) == {}
    # Moved into a root, the same adapter loads.
    inside = adapter_dir(tmp_path / "adapters", "sql")
    await apply(h, lora_doc("sql", str(inside)))
    await reaches(h, "sql", "Loaded")
    assert await held(url) == {"sql-lora": str(inside)}


def _with_config(model: Any, **config: Any) -> dict[str, Any]:
    doc: dict[str, Any] = model.model_dump(mode="json", by_alias=True, exclude_none=True)
    doc.pop("status", None)
    doc["metadata"] = {"name": doc["metadata"]["name"]}
    doc["spec"]["config"] = {**doc["spec"]["config"], **config}
    return doc


async def test_adapters_a_backend_cannot_load_fail_saying_why(h: Harness, tmp_path: Path) -> None:
    llama = model_doc("llama", fake_model_dir(tmp_path / "g").as_uri(), backend="llamacpp")
    await h.put_model(llama)
    no_lora = model_doc("plain", fake_model_dir(tmp_path / "p").as_uri(), backend="vllm")
    await h.put_model(no_lora)
    path = adapter_dir(tmp_path / "adapters", "sql")
    await apply(h, lora_doc("on-llama", str(path), model="llama"))
    await apply(h, lora_doc("on-plain", str(path), model="plain"))
    unsupported = await reaches(h, "on-llama", "Failed")
    assert reason(unsupported) == "BackendUnsupported"
    assert "'llamacpp'" in (unsupported.status.message or "")
    disabled = await reaches(h, "on-plain", "Failed")
    assert reason(disabled) == "LoRADisabled"
    assert "enableLora" in (disabled.status.message or "")
    await apply(h, lora_doc("nobase", str(path), model="absent"))
    waiting = await reaches(h, "nobase", "Pending")
    assert reason(waiting) == "ModelNotFound"
    external = model_doc("ext", "external://x", backend="vllm")
    external["spec"]["endpoints"] = ["http://127.0.0.1:9"]
    await h.put_model(external)
    await apply(h, lora_doc("outside", str(path), model="ext"))
    outside = await reaches(h, "outside", "Pending")
    assert reason(outside) == "ExternalModel"


async def test_an_adapter_not_preloaded_loads_on_the_first_request(
    h: Harness, tmp_path: Path
) -> None:
    url = await serve_base(h, tmp_path)
    path = adapter_dir(tmp_path / "adapters", "sql")
    await apply(h, lora_doc("sql", str(path), preload=False))
    waiting = await reaches(h, "sql", "Pending")
    assert reason(waiting) == "AwaitingRequest"
    assert await held(url) == {}
    asked = demand("default/base").model_copy(update={"adapter": "sql-lora"})
    await h.publish(topics.DEMAND, asked)
    await reaches(h, "sql", "Loaded")
    assert await held(url) == {"sql-lora": str(path)}
