"""Backends on the local runtime: installed servers get the rendered args, others an install
hint (through the real reconciler), and HTTP readiness runs a real HTTP server."""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import AsyncIterator, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest

from flexinfer_common.api import Model
from flexinfer_common.bus.memory import MemoryBus
from flexinfer_common.settings import StoreSettings
from flexinfer_common.store import ModelStore, create_store
from flexinfer_controller.app import controller_config
from flexinfer_controller.backends import (
    BackendNotInstalledError,
    HttpReadiness,
    LaunchContext,
    LaunchSpec,
    StaticProbe,
    UnsupportedBackendError,
    default_backends,
    launch,
)
from flexinfer_controller.core.controller import Controller
from flexinfer_controller.runtime import create_runtime
from flexinfer_controller.runtime.local import LocalRuntime, runtime_id
from flexinfer_controller.settings import ControllerSettings
from flexinfer_controller.testing import ReplicaEvents, fake_model_dir, kill_marked

PYTHON = "/venv/bin/python"


def model(backend: str, source: str, config: dict[str, Any] | None = None) -> Model:
    spec = {"backend": backend, "source": source, "config": config, "gpu": {"vendor": "auto"}}
    return Model.model_validate({"metadata": {"name": "demo"}, "spec": spec})


def ctx(probe: StaticProbe) -> LaunchContext:
    return LaunchContext(runtime="local", engine_python=PYTHON, probe=probe)


def local(
    m: Model, probe: StaticProbe, model_dir: Path | None = Path("/models/demo")
) -> LaunchSpec:
    backend = default_backends().get(m.spec.backend)
    assert backend is not None
    spec = launch(backend, m, model_dir, ctx(probe))
    assert spec.for_port is not None
    return spec.for_port(41000)


def test_vllm_executable_serves_the_model_positionally() -> None:
    spec = local(model("vllm", "HF://o/m", {"dtype": "half"}), StaticProbe({"vllm": "/bin/vllm"}))
    assert spec.argv == (
        "/bin/vllm", "serve", "/models/demo", "--host", "127.0.0.1", "--port", "41000",
        "--dtype", "half", "--served-model-name", "demo",
    )  # fmt: skip
    assert spec.env == {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    assert spec.http_ready == HttpReadiness("http://127.0.0.1:41000", "/health", 300.0)
    assert spec.health_path == "/health"


def test_importable_vllm_runs_its_openai_server_with_the_rendered_args() -> None:
    spec = local(model("vllm", "HF://o/m"), StaticProbe(modules=frozenset({"vllm"})))
    assert spec.argv == (
        PYTHON, "-m", "vllm.entrypoints.openai.api_server", "--host", "127.0.0.1",
        "--port", "41000", "--model", "/models/demo", "--served-model-name", "demo",
    )  # fmt: skip


def test_llama_server_on_path_takes_the_rendered_args() -> None:
    spec = local(model("llamacpp", "HF://o/m"), StaticProbe({"llama-server": "/bin/llama-server"}))
    assert spec.argv == (
        "/bin/llama-server", "--host", "127.0.0.1", "--port", "41000",
        "--model", "/models/demo", "--n-gpu-layers", "999",
    )  # fmt: skip


LLAMA_CPP_PYTHON = StaticProbe(modules=frozenset({"llama_cpp", "sse_starlette"}))


def test_llama_cpp_python_gets_the_same_settings_as_its_own_flags() -> None:
    config = {"ggufFile": "q4.gguf", "contextSize": 4096, "batchSize": 256, "threads": 4,
              "flashAttention": True, "mmproj": "/models/demo/mmproj.gguf", "jinja": True,
              "embedding": True}  # fmt: skip
    spec = local(model("llama.cpp", "HF://o/m", config), LLAMA_CPP_PYTHON)
    assert spec.argv == (
        PYTHON, "-m", "llama_cpp.server", "--host", "127.0.0.1", "--port", "41000",
        "--model", "/models/demo/q4.gguf", "--n_ctx", "4096", "--n_gpu_layers", "999",
        "--n_batch", "256", "--n_threads", "4", "--flash_attn", "true",
        "--clip_model_path", "/models/demo/mmproj.gguf", "--embedding", "true",
        "--model_alias", "demo",
    )  # fmt: skip
    assert spec.http_ready is not None
    assert spec.http_ready.path == "/v1/models"  # its server has no /health
    assert spec.health_path == "/v1/models"


def test_a_setting_llama_cpp_python_lacks_is_refused_not_dropped() -> None:
    with pytest.raises(UnsupportedBackendError, match="no equivalent of llama-server's --parallel"):
        local(model("llamacpp", "HF://o/m", {"parallel": 4}), LLAMA_CPP_PYTHON)


def test_ollama_serves_on_the_picked_port_then_pulls_and_names_the_model() -> None:
    m = model("ollama", "ollama://llama3.2:3b")
    spec = local(m, StaticProbe({"ollama": "/bin/ollama"}), model_dir=None)
    assert spec.argv == ("/bin/ollama", "serve")
    assert spec.env == {"OLLAMA_HOST": "127.0.0.1:41000", "OLLAMA_KEEP_ALIVE": "-1"}
    assert spec.http_ready is not None
    assert spec.http_ready.path == "/"
    assert spec.http_ready.then == (
        ("/api/pull", json.dumps({"model": "llama3.2:3b", "stream": False})),
        ("/api/copy", json.dumps({"source": "llama3.2:3b", "destination": "demo"})),
    )


@pytest.mark.parametrize(
    ("backend", "source", "hint"),
    [
        ("vllm", "HF://o/m", "needs the vllm server: pip install vllm (Linux + GPU)"),
        ("llamacpp", "HF://o/m", "pip install 'llama-cpp-python[server]'"),
        ("ollama", "ollama://llama3.2:3b", "needs the ollama server: install ollama"),
        ("mlc-llm", "HF://o/m", "runs from its image (ghcr.io/mlc-ai/mlc-llm:cuda)"),
    ],
)
def test_not_installed_names_what_to_install(backend: str, source: str, hint: str) -> None:
    with pytest.raises(BackendNotInstalledError) as refused:
        local(model(backend, source), StaticProbe())
    assert hint in str(refused.value)


# --- The not-installed path through the real reconciler --------------------------------


@pytest.fixture
async def controller(tmp_path: Path) -> AsyncIterator[tuple[Controller, ModelStore]]:
    """The real controller core on SQLite, told that no backend server is installed."""
    settings = ControllerSettings(data_dir=tmp_path / "data", stop_grace_s=2.0)
    config = controller_config(settings)
    config = dataclasses.replace(
        config, launch=dataclasses.replace(config.launch, probe=StaticProbe())
    )
    store = create_store(StoreSettings(url=f"sqlite:///{tmp_path / 'store.db'}"))
    bus = MemoryBus()
    core = Controller(
        config,
        store=store,
        bus=bus,
        runtime_factory=partial(create_runtime, settings),
        backends=default_backends(),
    )
    try:
        yield core, store
    finally:
        await core.runtime.close(stop_replicas=True)
        await store.close()
        await bus.close()


@pytest.mark.parametrize(
    ("backend", "source", "hint"),
    [
        ("vllm", "dir", "backend 'vllm' needs the vllm server: pip install vllm"),
        ("llama_cpp", "dir", "backend 'llamacpp' needs a llama.cpp server"),
        # Ollama pulls its model: an ollama:// source is not a directory to wait for.
        ("ollama", "ollama://llama3.2:3b", "backend 'ollama' needs the ollama server"),
    ],
)
async def test_a_backend_not_installed_fails_the_model_with_the_hint(
    controller: tuple[Controller, ModelStore], tmp_path: Path, backend: str, source: str, hint: str
) -> None:
    core, store = controller
    if source == "dir":
        source = fake_model_dir(tmp_path / "m").as_uri()
    await store.create_model(model(backend, source))
    await core.reconciler.reconcile("default/demo")
    failed = await store.get_model("default", "demo")
    assert failed.status.phase == "Failed"
    cond = {c.type: c for c in failed.status.conditions}["Schedulable"]
    assert (cond.status, cond.reason) == ("False", "BackendUnsupported")
    assert hint in cond.message
    assert failed.status.message is not None
    assert hint in failed.status.message
    assert core.runtime.list() == []


async def test_a_hostile_config_value_fails_the_model_as_invalid_config(
    controller: tuple[Controller, ModelStore], tmp_path: Path
) -> None:
    core, store = controller
    source = fake_model_dir(tmp_path / "m").as_uri()
    await store.create_model(model("vllm", source, {"dtype": "auto\n--api-key"}))
    await core.reconciler.reconcile("default/demo")
    failed = await store.get_model("default", "demo")
    assert failed.status.phase == "Failed"
    cond = {c.type: c for c in failed.status.conditions}["ConfigValid"]
    assert (cond.status, cond.reason) == ("False", "ConfigInvalid")
    assert "spec.config.dtype must not contain NUL or line breaks" in cond.message


# --- HTTP readiness in the local runtime, with a real HTTP server as the engine ---------


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "data"
    yield path
    kill_marked(runtime_id(path))


def http_server(
    directory: Path, path: str, timeout_s: float, then: tuple[tuple[str, str], ...] = ()
) -> LaunchSpec:
    """``python -m http.server`` on the port the runtime picks: a real engine that answers
    GET on files of ``directory`` and refuses POST (501)."""

    def bound(port: int) -> LaunchSpec:
        argv = (sys.executable, "-m", "http.server", "--bind", "127.0.0.1",
                "--directory", str(directory), str(port))  # fmt: skip
        ready = HttpReadiness(f"http://127.0.0.1:{port}", path, timeout_s, then=then)
        return LaunchSpec(argv=argv, served_name="demo", health_path=path, http_ready=ready)

    return dataclasses.replace(bound(0), for_port=bound)


async def test_an_http_ready_engine_is_ready_once_its_path_answers_200(
    data_dir: Path, tmp_path: Path
) -> None:
    (tmp_path / "www").mkdir()
    (tmp_path / "www" / "health").write_text("ok")
    events = ReplicaEvents()
    runtime = LocalRuntime(data_dir=data_dir, listener=events, stop_grace_s=2.0)
    try:
        started = await runtime.start(
            "default/demo", 1, http_server(tmp_path / "www", "/health", 60)
        )
        ready = await events.wait("ready", timeout_s=20.0)
        assert ready.replica.id == started.id
        assert ready.replica.url is not None
        assert ready.replica.url.startswith("http://127.0.0.1:")
        async with httpx.AsyncClient(trust_env=False) as client:
            assert (await client.get(ready.replica.url + "/health")).text == "ok"
        # A second replica gets a port of its own.
        await runtime.start("default/demo", 1, http_server(tmp_path / "www", "/health", 60))
        second = await events.wait("ready", timeout_s=20.0)
        assert second.replica.url != ready.replica.url
    finally:
        await runtime.close(stop_replicas=True)


async def test_an_engine_whose_path_never_answers_200_is_killed_after_its_timeout(
    data_dir: Path, tmp_path: Path
) -> None:
    (tmp_path / "www").mkdir()
    events = ReplicaEvents()
    runtime = LocalRuntime(data_dir=data_dir, listener=events, stop_grace_s=2.0)
    try:
        await runtime.start("default/demo", 1, http_server(tmp_path / "www", "/missing", 0.5))
        exited = await events.wait("exited", timeout_s=20.0)
        assert not exited.expected
        assert "GET /missing not 200 within 0.5s" in exited.message
        assert [e for e in events.items if e.kind == "ready"] == []
    finally:
        await runtime.close(stop_replicas=True)


async def test_a_readiness_post_that_fails_fails_the_start(data_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "www").mkdir()
    events = ReplicaEvents()
    runtime = LocalRuntime(data_dir=data_dir, listener=events, stop_grace_s=2.0)
    pull = (("/api/pull", json.dumps({"model": "x"})),)
    try:
        await runtime.start("default/demo", 1, http_server(tmp_path / "www", "/", 60, pull))
        exited = await events.wait("exited", timeout_s=20.0)
        assert not exited.expected
        assert "POST /api/pull answered 501" in exited.message
    finally:
        await runtime.close(stop_replicas=True)
