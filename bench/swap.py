"""Swap latency on one shared GPU: full restart against sleep/wake against co-resident.

Two Models of one ``spec.gpu.shared`` group (the reference engine, ``--preset`` weights,
a 1-GPU inventory of 24 GiB declared to the local runtime) take turns. Each measured swap
is one streaming chat request through the proxy for the Model that does not hold the GPU:
the time from sending it (the first queued request of the rival) to its first token.
Before each, the bench waits for the holder to be idle (one demand window), so that the
arbiter swaps at once rather than after a cooldown. Three kinds, one embedded stack each
(``flexinfer up``):

- restart: each Model's ``vramEstimateMB`` is 16000, so only one fits, and sleep is off:
  the holder's engine is stopped, the rival's cold-started;
- sleep: as restart, with ``FLEXINFER_CONTROLLER_SLEEP_BUDGET_MB`` set: the holder's
  engine is put to sleep, the rival's woken;
- co-resident: 8000 each, so both fit: no swap, both engines serve throughout.

Two unmeasured requests first start both engines. Reports the median per kind, its ratio
to the restart's median, and how many engine processes each kind started in all (sleep
and co-resident: 2, the wake is the same process). Goal: sleep/wake <= 0.05x restart.

    python bench/swap.py [--preset medium] [--swaps 6]
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
from pathlib import Path

import httpx
import psutil

GPUS = [{"vendor": "nvidia", "arch": "sm_90", "vram": "24Gi", "node": "bench"}]
WINDOW_S = 1.0
"""The arbiter's demand window: a holder is idle this long after its last request."""
KINDS = {
    "restart": (16000, 0),
    "sleep": (16000, 16384),
    "co-resident": (8000, 0),
}
"""kind -> (vramEstimateMB of each Model, sleep budget in MiB)."""


def start_stack(work: Path, budget_mb: int) -> tuple[dict[str, str], subprocess.Popen[bytes]]:
    """``flexinfer up`` with the GPU inventory, the arbiter and the sleep budget."""
    env = {
        **os.environ,
        "FLEXINFER_CONTROLLER_GPUS": json.dumps(GPUS),
        "FLEXINFER_CONTROLLER_GPU_SHARING_MODE": "arbiter",
        "FLEXINFER_CONTROLLER_GPU_SHARING_DEMAND_WINDOW_S": str(WINDOW_S),
        "FLEXINFER_CONTROLLER_SLEEP_BUDGET_MB": str(budget_mb),
        "FLEXINFER_CONTROLLER_ENGINE_PYTHON": sys.executable,
    }
    cmd = [sys.executable, "-m", "flexinfer_cli", "up", "--data-dir", str(work)]
    ready = work / "endpoints.json"
    with (work / "up.log").open("ab") as out:
        proc = subprocess.Popen([*cmd, "--port", "0", "--no-demo"], env=env, stdout=out, stderr=out)
    deadline = time.monotonic() + 90
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the stack did not start; see {work / 'up.log'}")
        time.sleep(0.05)  # a bench waiting for a process, not a test
    return json.loads(ready.read_text()), proc


def apply_models(controller: str, model_dir: Path, vram_mb: int) -> None:
    """Models a and b in group g; a long idle timeout: only the arbiter takes them down."""
    for name in ("a", "b"):
        gpu = {"vendor": "nvidia", "shared": "g", "vramEstimateMB": vram_mb, "swapCooldown": "0s"}
        manifest = {
            "apiVersion": "ai.flexinfer/v1alpha2",
            "kind": "Model",
            "metadata": {"name": name},
            "spec": {
                "backend": "reference",
                "source": model_dir.as_uri(),
                "gpu": gpu,
                "serverless": {"idleTimeout": "600s"},
            },
        }
        url = f"{controller}/v1/admin/models/{name}"
        httpx.put(url, json=manifest, timeout=30).raise_for_status()


def first_token_s(proxy: str, model: str) -> float:
    """Seconds from sending one streaming chat request for ``model`` to its first token."""
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 2,
        "stream": True,
    }
    started = time.perf_counter()
    first = None
    url = f"{proxy}/v1/chat/completions"
    with httpx.stream("POST", url, json=body, timeout=300) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if first is None and '"content"' in line:
                first = time.perf_counter() - started
    if first is None:
        raise SystemExit(f"no token arrived for {model}")
    return first


def engine_pids(model_dir: Path) -> set[int]:
    """The engine processes serving the bench model now."""
    pids = set()
    for proc in psutil.process_iter(["cmdline"]):
        cmd = proc.info["cmdline"] or []
        if "flexinfer_engine" in cmd and str(model_dir) in cmd:
            pids.add(proc.pid)
    return pids


def run_kind(kind: str, model_dir: Path, swaps: int, work: Path) -> tuple[list[float], int]:
    """The measured swap times of ``kind``, and how many engine processes it started."""
    vram_mb, budget_mb = KINDS[kind]
    urls, proc = start_stack(work, budget_mb)
    seen: set[int] = set()
    try:
        apply_models(urls["controller"], model_dir, vram_mb)
        times = []
        for i in range(swaps + 2):
            time.sleep(WINDOW_S * 1.5)  # the holder goes idle: the arbiter may swap at once
            took = first_token_s(urls["proxy"], "ab"[i % 2])
            seen |= engine_pids(model_dir)
            if i >= 2:  # the first two start both engines
                times.append(took)
                print(f"{kind} swap {i - 1}: {took * 1000:.0f} ms", flush=True)
    finally:
        proc.terminate()
        proc.wait(60)
    return times, len(seen)


def main() -> int:
    """Run the three kinds and print a Markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="medium")
    parser.add_argument("--swaps", type=int, default=6)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="flexinfer-bench-swap-") as tmp:
        model_dir = Path(tmp) / "models" / args.preset
        subprocess.run(
            [sys.executable, "-m", "flexinfer_engine", "generate", args.preset,
             "--out", str(model_dir), "--preset", args.preset],
            check=True, capture_output=True,
        )  # fmt: skip
        results = {}
        for kind in KINDS:
            work = Path(tmp) / kind
            work.mkdir()
            results[kind] = run_kind(kind, model_dir, args.swaps, work)
    base = statistics.median(results["restart"][0])
    print(f"\n{args.preset} preset, {args.swaps} swaps per kind\n")
    print("| kind | median (ms) | min-max (ms) | ratio to restart | engines started |")
    print("|---|---|---|---|---|")
    for kind, (times, started) in results.items():
        med = statistics.median(times)
        print(
            f"| {kind} | {med * 1000:.0f} | {min(times) * 1000:.0f}-{max(times) * 1000:.0f} "
            f"| {med / base:.3f}x | {started} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
