"""Reference engines and a static proxy as plain subprocesses, and a slow-loading model.

For fault tests that put something (a FaultProxy) between the FlexInfer proxy and an
engine: ``reference_engine`` runs ``python -m flexinfer_engine serve`` and waits for its
ready line, ``static_proxy`` runs ``flexinfer proxy --static NAME=URL ...``.
``loaded_engine`` and ``app_client`` serve an engine in-process, through its ASGI app.
``many_shard_model`` writes a valid sharded model whose load takes long enough (thousands
of shard files) for a test to catch an engine in the middle of loading it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import psutil

if TYPE_CHECKING:
    from flexinfer_engine.core.engine import InferenceEngine
    from flexinfer_engine.settings import EngineSettings

from flexinfer_testing.stack import START_TIMEOUT_S, flexinfer_command, stop_process, wait_for_file


@dataclass
class Process:
    """A started service: its process and the base URL it serves on."""

    proc: subprocess.Popen[bytes]
    url: str
    log: Path

    @property
    def pid(self) -> int:
        """The process id."""
        return self.proc.pid

    def log_tail(self, limit: int = 2000) -> str:
        """The end of the process's log, for failure messages."""
        return self.log.read_text(errors="replace")[-limit:]


@contextmanager
def reference_engine(
    model_dir: Path,
    log: Path,
    *,
    name: str = "tiny",
    env: Mapping[str, str] | None = None,
    args: Sequence[str] = (),
) -> Iterator[Process]:
    """``python -m flexinfer_engine serve [ARGS]`` on a free loopback port, once it is ready."""
    read_fd, write_fd = os.pipe()
    out = log.open("ab")
    argv = [
        sys.executable, "-m", "flexinfer_engine", "serve", "--model-dir", str(model_dir),
        "--served-model-name", name, "--port", "0", "--ready-fd", str(write_fd), *args,
    ]  # fmt: skip
    proc = subprocess.Popen(
        argv, env={**os.environ, **(env or {})}, stdout=out, stderr=out,
        stdin=subprocess.DEVNULL, pass_fds=(write_fd,),
    )  # fmt: skip
    out.close()
    os.close(write_fd)
    try:
        with os.fdopen(read_fd, "rb") as ready:
            line = ready.readline()  # EOF (b"") if the engine dies first
        if not line:
            raise RuntimeError(f"engine exited before it was ready: {log.read_text()[-2000:]}")
        yield Process(proc, json.loads(line)["url"], log)
    finally:
        stop_process(proc)


@contextmanager
def static_proxy(
    workdir: Path, models: Mapping[str, str], env: Mapping[str, str] | None = None
) -> Iterator[Process]:
    """``flexinfer proxy --static NAME=URL ... --port 0``, once it serves."""
    workdir.mkdir(parents=True, exist_ok=True)
    ready = workdir / "proxy.ready.json"
    log = workdir / "proxy.log"
    args = [arg for name, url in models.items() for arg in ("--static", f"{name}={url}")]
    out = log.open("ab")
    proc = subprocess.Popen(
        flexinfer_command("proxy", *args, "--port", "0"),
        env={**os.environ, **(env or {}), "FLEXINFER_READY_FILE": str(ready)},
        cwd=workdir, stdout=out, stderr=out, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    out.close()
    try:
        urls = wait_for_file(ready, proc, START_TIMEOUT_S)
        yield Process(proc, urls["proxy"], log)
    finally:
        stop_process(proc)


def listening_url(pid: int, timeout_s: float) -> str:
    """``http://127.0.0.1:<port>`` of the TCP port process ``pid`` listens on."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            ports = [
                c.laddr.port
                for c in psutil.Process(pid).net_connections(kind="tcp4")
                if c.status == psutil.CONN_LISTEN
            ]
        except psutil.NoSuchProcess as exc:
            raise RuntimeError(f"process {pid} exited before it listened") from exc
        if ports:
            return f"http://127.0.0.1:{ports[0]}"
        if time.monotonic() > deadline:
            raise TimeoutError(f"process {pid} did not listen within {timeout_s}s")
        time.sleep(0.01)


def engine_state(url: str) -> str | None:
    """The engine's own lifecycle state from /engine/info (loading, ready...), None if it
    does not answer."""
    try:
        response = httpx.get(f"{url}/engine/info", timeout=2.0)
    except httpx.HTTPError:
        return None
    if response.status_code != 200:
        return None
    state = response.json().get("state")
    return str(state) if state is not None else None


def many_shard_model(out: Path, layers: int = 500) -> Path:
    """A valid reference model with one safetensors shard per tensor (~12 per layer).

    Loading opens every shard, so with a few thousand of them an engine stays in its
    ``loading`` state for a good fraction of a second: long enough to be caught there.
    The layers are narrow (hidden size 16), so generating from it stays quick.
    """
    from safetensors.torch import save_file

    from flexinfer_engine.core.config import ModelConfig
    from flexinfer_engine.core.weights import random_state_dict

    config = ModelConfig(16, layers, 2, 32, 128)
    out.mkdir(parents=True, exist_ok=True)
    weight_map = {}
    for index, (key, tensor) in enumerate(random_state_dict(config, seed=1).items()):
        shard = f"shard-{index:05d}.safetensors"
        save_file({key: tensor}, out / shard, metadata={"format": "pt"})
        weight_map[key] = shard
    (out / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    (out / "config.json").write_text(json.dumps(config.to_hf_dict()))
    return out


def loaded_engine(model_dir: Path) -> InferenceEngine:
    """An engine with its weights loaded from ``model_dir`` (the file strategies)."""
    from flexinfer_engine.app import build_engine
    from flexinfer_engine.settings import EngineSettings

    engine = build_engine(EngineSettings(model_dir=model_dir))
    engine.load()
    return engine


@asynccontextmanager
async def app_client(
    settings: EngineSettings, engine: InferenceEngine
) -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client of the engine's app serving ``engine``, in-process (no socket)."""
    from flexinfer_engine.app import create_app

    transport = httpx.ASGITransport(app=create_app(settings, engine=engine))
    async with httpx.AsyncClient(transport=transport, base_url="http://engine") as client:
        yield client
