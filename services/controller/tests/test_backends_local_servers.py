"""vLLM, llama-cpp-python's server and Ollama through the real local controller to Ready.

The servers are the stand-ins of flexinfer_testing.backend_servers, found the way the real
ones are (PATH, PYTHONPATH); each parses its real CLI strictly, so the argv the launcher
renders is checked by the server that receives it, and is compared with the pinned one.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from flexinfer_common.bus import topics
from flexinfer_controller.testing import (
    Harness,
    demand,
    fake_model_dir,
    kill_engines,
    model_doc,
    run_controller,
)
from flexinfer_testing.backend_servers import StandIns, install_standins

GPU = {"vendor": "nvidia", "count": 1, "arch": "sm_89", "vram": "24Gi"}
"""Declared so that vllm (GPU only) is placed, and llama.cpp renders its GPU flags."""


@pytest.fixture
def standins(tmp_path: Path) -> Iterator[StandIns]:
    """The stand-ins, on no path yet; no engine outlives the test."""
    yield install_standins(tmp_path / "standins")
    assert kill_engines(tmp_path) == [], "a test left engines running"


def on_path(monkeypatch: pytest.MonkeyPatch, standins: StandIns) -> None:
    """Executables first on PATH, as an installed ``vllm``/``ollama`` would be."""
    monkeypatch.setenv("PATH", f"{standins.bin_dir}{os.pathsep}{os.environ['PATH']}")


def on_pythonpath(monkeypatch: pytest.MonkeyPatch, standins: StandIns) -> None:
    """Packages importable by the engine's interpreter: PYTHONPATH for the engine process,
    sys.path for the probe (engine_python is this interpreter, asked in-process)."""
    monkeypatch.setenv("PYTHONPATH", str(standins.site_dir))
    monkeypatch.syspath_prepend(str(standins.site_dir))


async def serve_to_ready(h: Harness, doc: dict[str, Any]) -> str:
    """Apply ``doc``, send demand, wait for its endpoint and phase Ready; the endpoint."""
    name = doc["metadata"]["name"]
    await h.put_model(doc)
    await h.publish(topics.DEMAND, demand(f"default/{name}"))
    ready = await h.wait_phase(name, "Ready", timeout_s=30)
    assert ready.status.endpoint is not None
    return ready.status.endpoint


async def chat(url: str, model: str) -> dict[str, Any]:
    """One chat completion against the discovered endpoint, asserted 200."""
    message = {"role": "user", "content": "hi"}
    async with httpx.AsyncClient(base_url=url, timeout=10, trust_env=False) as client:
        reply = await client.post(
            "/v1/chat/completions", json={"model": model, "messages": [message]}
        )
    assert reply.status_code == 200, reply.text
    body: dict[str, Any] = reply.json()
    return body


def doc_for(backend: str, source: str, config: dict[str, Any] | None = None) -> dict[str, Any]:
    """A Model ``demo`` with ``backend``, ``source`` and spec.config."""
    doc = model_doc("demo", source, backend=backend, idle_timeout="60s")
    doc["spec"]["config"] = config
    doc["spec"]["gpu"] = {"vendor": "auto"}  # detectGPU places it on the declared GPU
    return doc


def port_of(url: str) -> str:
    """The port of http://127.0.0.1:PORT."""
    return url.rsplit(":", 1)[1]


async def test_vllm_on_path_serves_the_model_to_ready(
    tmp_path: Path, standins: StandIns, monkeypatch: pytest.MonkeyPatch
) -> None:
    on_path(monkeypatch, standins)
    model_dir = fake_model_dir(tmp_path / "m")
    async with run_controller(tmp_path, engine_python=sys.executable, gpus=[GPU]) as h:
        url = await serve_to_ready(h, doc_for("vllm", model_dir.as_uri(), {"dtype": "half"}))
        assert (await chat(url, "demo"))["model"] == "demo"
    # As test_backends_local pins it: ``vllm serve MODEL`` with the rendered flags.
    assert [launch["argv"] for launch in standins.launches("vllm")] == [[
        "serve", str(model_dir), "--host", "127.0.0.1", "--port", port_of(url),
        "--dtype", "half", "--served-model-name", "demo",
    ]]  # fmt: skip


async def test_importable_vllm_runs_its_api_server_module_to_ready(
    tmp_path: Path, standins: StandIns, monkeypatch: pytest.MonkeyPatch
) -> None:
    on_pythonpath(monkeypatch, standins)
    model_dir = fake_model_dir(tmp_path / "m")
    async with run_controller(tmp_path, engine_python=sys.executable, gpus=[GPU]) as h:
        url = await serve_to_ready(h, doc_for("vllm", model_dir.as_uri()))
        assert (await chat(url, "demo"))["model"] == "demo"
    assert [launch["argv"] for launch in standins.launches("vllm-api-server")] == [[
        "--host", "127.0.0.1", "--port", port_of(url), "--model", str(model_dir),
        "--served-model-name", "demo",
    ]]  # fmt: skip
    assert standins.launches("vllm") == []


async def test_llama_cpp_python_server_serves_the_gguf_to_ready(
    tmp_path: Path, standins: StandIns, monkeypatch: pytest.MonkeyPatch
) -> None:
    on_pythonpath(monkeypatch, standins)
    model_dir = fake_model_dir(tmp_path / "m")
    (model_dir / "q4.gguf").write_bytes(b"GGUF")  # the stand-in checks it exists, no more
    (model_dir / "mmproj.gguf").write_bytes(b"GGUF")
    config = {"ggufFile": "q4.gguf", "contextSize": 4096, "batchSize": 256, "threads": 4,
              "flashAttention": True, "mmproj": str(model_dir / "mmproj.gguf"), "jinja": True,
              "embedding": True}  # fmt: skip
    async with run_controller(tmp_path, engine_python=sys.executable, gpus=[GPU]) as h:
        url = await serve_to_ready(h, doc_for("llamacpp", model_dir.as_uri(), config))
        assert (await chat(url, "demo"))["model"] == "demo"
    assert [launch["argv"] for launch in standins.launches("llama_cpp.server")] == [[
        "--host", "127.0.0.1", "--port", port_of(url), "--model", str(model_dir / "q4.gguf"),
        "--n_ctx", "4096", "--n_gpu_layers", "999", "--n_batch", "256", "--n_threads", "4",
        "--flash_attn", "true", "--clip_model_path", str(model_dir / "mmproj.gguf"),
        "--embedding", "true", "--model_alias", "demo",
    ]]  # fmt: skip


async def test_ollama_serves_pulls_and_names_the_model_to_ready(
    tmp_path: Path, standins: StandIns, monkeypatch: pytest.MonkeyPatch
) -> None:
    on_path(monkeypatch, standins)
    async with run_controller(tmp_path, engine_python=sys.executable, gpus=[GPU]) as h:
        url = await serve_to_ready(h, doc_for("ollama", "ollama://llama3.2:3b"))
        assert (await chat(url, "demo"))["model"] == "demo"
        async with httpx.AsyncClient(base_url=url, trust_env=False) as client:
            tags = (await client.get("/api/tags")).json()
        assert [m["name"] for m in tags["models"]] == ["demo:latest", "llama3.2:3b"]
    [launch] = standins.launches("ollama")
    assert launch["argv"] == ["serve"]
    assert launch["env"] == {"OLLAMA_HOST": f"127.0.0.1:{port_of(url)}", "OLLAMA_KEEP_ALIVE": "-1"}


@pytest.mark.parametrize(
    ("command", "module"),
    [
        (["vllm", "serve", "/m", "--model-len", "4"], False),
        (["vllm.entrypoints.openai.api_server", "--n_ctx", "4"], True),
        (["llama_cpp.server", "--ctx-size", "4"], True),
        (["ollama", "serve", "--port", "1"], False),
    ],
)
def test_each_standin_refuses_a_flag_its_server_lacks(
    standins: StandIns, command: list[str], module: bool
) -> None:
    """Exit 2 as the real parser does: a wrongly rendered argv can never reach Ready."""
    env = {**os.environ, "PYTHONPATH": str(standins.site_dir)}
    argv = [sys.executable, "-m", *command] if module else [str(standins.bin_dir / command[0]),
                                                            *command[1:]]  # fmt: skip
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 2, done.stderr
    assert "unrecognized arguments" in done.stderr
