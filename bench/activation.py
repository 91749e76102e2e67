"""Activation overhead: what scale-from-zero adds on top of the engine's own start.

For each run the model is at zero replicas; one streaming chat request goes through the
proxy. overhead = time to first token - (engine process start + weight load), both as the
engine itself reports them on /engine/info. The rest is ours: queueing, the demand event,
reconcile, spawn, readiness detection, endpoint propagation, forwarding, the first token.

    python bench/activation.py [--runs 10] [--mode embedded|distributed]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import psutil

MODEL = "bench"
BENCH_REDIS = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
BENCH_PREFIX = f"bench-{uuid.uuid4().hex[:8]}:"


def _start(cmd: list[str], env: dict[str, str], ready: Path, log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=out, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 90
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"{cmd[3]} did not start; see {log}")
        time.sleep(0.05)
    return proc


def drop_streams(mode: str) -> None:
    """Delete the Redis streams a distributed run created (nothing to do when embedded)."""
    if mode != "distributed":
        return
    import redis

    client = redis.Redis.from_url(BENCH_REDIS)
    try:
        keys = list(client.scan_iter(match=f"{BENCH_PREFIX}*", count=1000))
        if keys:
            client.delete(*keys)
    finally:
        client.close()


def start_stack(mode: str, work: Path) -> tuple[dict[str, str], list[subprocess.Popen[bytes]]]:
    """Start the stack; return its URLs and processes."""
    flexinfer = [sys.executable, "-m", "flexinfer_cli"]
    env = dict(os.environ)
    if mode == "embedded":
        proc = _start(
            [*flexinfer, "up", "--data-dir", str(work), "--port", "0", "--no-demo"],
            env,
            work / "endpoints.json",
            work / "up.log",
        )
        return json.loads((work / "endpoints.json").read_text()), [proc]
    env.update(
        {
            "FLEXINFER_BUS_URL": BENCH_REDIS,
            "FLEXINFER_BUS_STREAM_PREFIX": BENCH_PREFIX,
            "FLEXINFER_STORE_URL": f"sqlite:///{work}/store.db",
            "FLEXINFER_CONTROLLER_STOP_ENGINES_ON_SHUTDOWN": "true",
        }
    )
    procs, urls = [], {}
    for name, extra in (("controller", ["--data-dir", str(work / "controller")]), ("proxy", [])):
        ready = work / f"{name}.json"
        procs.append(
            _start(
                [*flexinfer, name, "--port", "0", *extra],
                {**env, "FLEXINFER_READY_FILE": str(ready)},
                ready,
                work / f"{name}.log",
            )
        )
        urls[name] = next(iter(json.loads(ready.read_text()).values()))
    return urls, procs


def apply_model(controller: str, model_dir: Path) -> None:
    """Declare the benchmark model with a 1 s idle timeout, so it returns to zero quickly."""
    manifest = {
        "apiVersion": "ai.flexinfer/v1alpha2",
        "kind": "Model",
        "metadata": {"name": MODEL},
        "spec": {
            "backend": "reference",
            "source": model_dir.as_uri(),
            "gpu": {"vendor": "cpu"},
            "serverless": {"minReplicas": 0, "idleTimeout": "1s"},
        },
    }
    httpx.put(f"{controller}/v1/admin/models/{MODEL}", json=manifest, timeout=30).raise_for_status()


def engines(model_dir: Path) -> list[psutil.Process]:
    """Running engines for the benchmark model."""
    out = []
    for proc in psutil.process_iter(["cmdline"]):
        cmd = proc.info["cmdline"] or []
        if "flexinfer_engine" in cmd and str(model_dir) in cmd:
            out.append(proc)
    return out


def wait_zero(model_dir: Path, timeout: float = 60) -> None:
    """Wait until the model has no engine."""
    deadline = time.monotonic() + timeout
    while engines(model_dir):
        if time.monotonic() > deadline:
            raise SystemExit("the model did not scale to zero")
        time.sleep(0.05)


def one_run(urls: dict[str, str]) -> dict[str, float]:
    """Cold-start the model with one streaming request; return timings in seconds."""
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 4,
        "stream": True,
    }
    start = time.perf_counter()
    ttft = None
    with httpx.stream(
        "POST", f"{urls['proxy']}/v1/chat/completions", json=body, timeout=120
    ) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if ttft is None and '"content"' in line:
                ttft = time.perf_counter() - start
    assert ttft is not None, "no token arrived"
    status = httpx.get(f"{urls['controller']}/v1/admin/models/{MODEL}", timeout=10).json()
    info: dict[str, Any] = httpx.get(
        f"{status['status']['endpoint']}/engine/info", timeout=10
    ).json()
    engine = info["process_start_seconds"] + info["weight_load_seconds"]
    return {
        "ttft": ttft,
        "process_start": info["process_start_seconds"],
        "weight_load": info["weight_load_seconds"],
        "overhead": ttft - engine,
    }


def main() -> int:
    """Run the benchmark and print a Markdown table row per mode."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--mode", choices=["embedded", "distributed"], default="embedded")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="flexinfer-bench-") as tmp:
        work = Path(tmp)
        model_dir = work / "models" / "tiny"
        subprocess.run(
            [sys.executable, "-m", "flexinfer_engine", "generate", "tiny", "--out", str(model_dir)],
            check=True,
            capture_output=True,
        )
        urls, procs = start_stack(args.mode, work)
        try:
            apply_model(urls["controller"], model_dir)
            runs = []
            for i in range(args.runs):
                wait_zero(model_dir)
                runs.append(one_run(urls))
                print(
                    f"run {i + 1}: "
                    + ", ".join(f"{k}={v * 1000:.1f}ms" for k, v in runs[-1].items()),
                    flush=True,
                )
        finally:
            for proc in procs:
                proc.terminate()
                proc.wait(30)
            drop_streams(args.mode)
    med = {k: statistics.median(r[k] for r in runs) * 1000 for k in runs[0]}
    print(
        f"\n| {args.mode} | {args.runs} | {med['ttft']:.0f} | {med['process_start']:.0f} | "
        f"{med['weight_load']:.1f} | **{med['overhead']:.1f}** |"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
