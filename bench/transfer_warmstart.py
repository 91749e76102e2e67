"""Warm-start section of bench/transfer.py: a second replica's time to ready, three ways.

A registry runs on a thread of this process with a provider that copies a generated model
(``--warm-preset``, the engine's presets) from a local directory. Replica 1, a real engine
process, loads the model from the cache directory and publishes itself as a P2P source.
Then, ``--rounds`` times and in alternating order, a second engine process starts cold and
the clock runs from its spawn to its ready line (imports, model build, weights, app):

- p2p: with the registry address: it finds replica 1 through ListSources and READs every
  tensor over NIXL (UCX);
- cache: without a registry: it reads the cache directory (the file strategies);
- stream: the model is first streamed from the registry (StreamModelFiles, ``flexinfer
  mx``'s client) into a fresh directory, then the engine loads that directory; the clock
  includes the stream.

Reports seconds to ready (median, min-max), the weight load alone as the engine reports it
(``/healthz`` ``weights.seconds``), and the per-round ratios against p2p.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
from registry import CountingProvider, registry

from flexinfer_engine.core.weights import generate_model
from flexinfer_registry.client.mx_client import MxClient
from flexinfer_registry.client.mx_fetch import marker, write_streamed
from flexinfer_transfer.registry_directory import RegistryDirectory
from flexinfer_transfer.strategy import LoadContext

NAME = "bench/warm"


@contextmanager
def engine(model_dir: Path, env: dict[str, str]) -> Iterator[tuple[float, str]]:
    """An engine process on ``model_dir``: (seconds from spawn to its ready line, url)."""
    read_fd, write_fd = os.pipe()
    argv = [
        sys.executable, "-m", "flexinfer_engine", "serve", "--model-dir", str(model_dir),
        "--served-model-name", NAME, "--port", "0", "--ready-fd", str(write_fd),
    ]  # fmt: skip
    started = time.perf_counter()
    proc = subprocess.Popen(
        argv, env={**os.environ, **env}, pass_fds=(write_fd,),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    os.close(write_fd)
    try:
        with os.fdopen(read_fd, "rb") as ready:
            line = ready.readline()
        if not line:
            raise SystemExit(f"engine on {model_dir} exited before it was ready")
        yield time.perf_counter() - started, json.loads(line)["url"]
    finally:
        proc.terminate()
        proc.wait(60)


def _wait_listed(address: str) -> None:
    """Until replica 1's READY record is in the registry (it publishes after its load)."""
    directory = RegistryDirectory(address)
    ctx = LoadContext(Path("."), model_name=NAME)
    deadline = time.monotonic() + 60
    while not directory.list_sources(ctx):
        if time.monotonic() > deadline:
            raise SystemExit("replica 1 never appeared READY in the registry")
        time.sleep(0.1)


def _weights(url: str) -> dict[str, object]:
    body = httpx.get(f"{url}/healthz", timeout=10).json()
    return dict(body["weights"])


def _stream(address: str, out: Path) -> None:
    """StreamModelFiles of the cached model into ``out``, as ``flexinfer mx`` writes it."""
    with MxClient(address) as client:
        listing = client.list_files(NAME, 0, None)
        note = marker(NAME, None, [(f["path"], f["size"]) for f in listing["files"]])
        write_streamed(client.stream(NAME, 0, None), listing, out, note)


def run_warmstart(preset: str, rounds: int) -> None:
    """Print the warm-start table for ``rounds`` rounds of each contender."""
    with tempfile.TemporaryDirectory(prefix="warmstart-") as tmp:
        root = Path(tmp)
        source = generate_model(root / "src" / "warm", name="warm", preset=preset)
        size = sum(p.stat().st_size for p in source.glob("*.safetensors"))
        print(f"warm start: preset {preset}, {size / 1e6:.0f} MB of weights, {rounds} rounds")
        with registry(root / "registry", CountingProvider(root / "src")) as address:
            with MxClient(address) as client:
                for _ in client.ensure(NAME, 0, None, False):
                    pass
            cache = root / "cache"
            shutil.copytree(source, cache)
            p2p_env = {"FLEXINFER_ENGINE_REGISTRY": address, "FLEXINFER_ENGINE_P2P_SOURCE": "1"}
            with engine(cache, {**p2p_env, "FLEXINFER_ENGINE_WORKER_ID": "replica-1"}) as (_, one):
                print(f"replica 1 loaded via {_weights(one)['strategy']}")
                _wait_listed(address)
                _rounds(root, cache, address, p2p_env, rounds)


def _rounds(root: Path, cache: Path, address: str, p2p_env: dict[str, str], rounds: int) -> None:
    def p2p() -> tuple[float, dict[str, object]]:
        with engine(cache, {**p2p_env, "FLEXINFER_ENGINE_WORKER_ID": "replica-2"}) as (s, url):
            return s, _weights(url)

    def from_cache() -> tuple[float, dict[str, object]]:
        with engine(cache, {}) as (s, url):
            return s, _weights(url)

    def stream() -> tuple[float, dict[str, object]]:
        target = root / f"streamed-{time.monotonic_ns()}"
        started = time.perf_counter()
        _stream(address, target)
        streamed = time.perf_counter() - started
        with engine(target, {}) as (s, url):
            weights = _weights(url)
        shutil.rmtree(target)
        return streamed + s, {**weights, "stream_s": streamed}

    contenders: dict[str, Callable[[], tuple[float, dict[str, object]]]] = {
        "p2p": p2p, "cache": from_cache, "stream": stream,
    }  # fmt: skip
    ready: dict[str, list[float]] = {name: [] for name in contenders}
    loads: dict[str, list[float]] = {name: [] for name in contenders}
    for index in range(rounds):
        order = list(contenders) if index % 2 == 0 else list(reversed(contenders))
        for name in order:
            seconds, weights = contenders[name]()
            ready[name].append(seconds)
            loads[name].append(float(str(weights["seconds"])))
            print(f"  round {index + 1} {name}: ready {seconds:.2f}s, {weights}")
    _report(ready, loads)


def _report(ready: dict[str, list[float]], loads: dict[str, list[float]]) -> None:
    print("| path | time to ready (s) | weight load (s) | ready / p2p's |")
    print("|---|---|---|---|")
    for name, values in ready.items():
        ratios = [v / p for v, p in zip(values, ready["p2p"], strict=True)]
        print(
            f"| {name} | {statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"
            f" | {statistics.median(loads[name]):.3f} | {statistics.median(ratios):.2f} |"
        )
