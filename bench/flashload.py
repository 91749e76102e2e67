"""Flash loader benchmark: our parallel copy to tmpfs against ``cp -r`` of the same files.

A model-like directory (``--shards`` safetensors files totalling ``--size-mb``, plus a few
small json files) is generated on the machine's disk, then copied to the destination
filesystem (``/dev/shm`` when it exists and has room for it, else a temp dir) ``--rounds``
times by each contender, interleaved and in alternating order so that drift in the
machine's load hits both alike:

- ours: ``flash_load`` with the default settings, for each of ``--methods`` (copy
  syscalls; ``auto`` picks the first the kernel accepts) and ``--workers`` (threads), each
  a row, timed around the whole call (plan, free-space check, copy, fsync, rename);
- cp: ``cp -r SRC DEST`` in a subprocess, timed around the process.

Each copy is removed before the next one starts (untimed), so every copy writes fresh
tmpfs pages. The page cache cannot be dropped without root on a shared machine, so the
source is read once before the rounds and every run reads it warm (page-cached): this
measures the copy's own cost, not a PVC's read throughput. Reports GB/s (decimal) of each
contender (median, min-max) and the median of the per-round ratios ours/cp.

    python bench/flashload.py [--size-mb 512] [--shards 4] [--rounds 5] [--workers 1,4]
                              [--methods auto,pread]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from flexinfer_controller.flashload import FlashLoadSettings, flash_load
from flexinfer_controller.flashload.testing import SHM, make_model

MIB = 1 << 20


def destination(size: int) -> Path:
    """A fresh directory on /dev/shm when it has room for one copy (plus slack), else /tmp."""
    if SHM.is_dir() and shutil.disk_usage(SHM).free > size + 512 * MIB:
        return Path(tempfile.mkdtemp(prefix="flexinfer-bench-flashload-", dir=SHM))
    return Path(tempfile.mkdtemp(prefix="flexinfer-bench-flashload-"))


def warm(source: Path) -> None:
    """Read every file once, so each run finds the source in the page cache."""
    for path in source.rglob("*"):
        if path.is_file():
            with path.open("rb") as handle:
                while handle.read(16 * MIB):
                    pass


def ours(source: Path, dest: Path, workers: int, method: str) -> Callable[[], float]:
    """A timed flash load into ``dest`` with ``workers`` threads and ``method``; seconds."""
    settings = FlashLoadSettings.model_validate(
        {"concurrency": workers, "margin_mb": 0, "method": method}
    )

    def run() -> float:
        started = time.perf_counter()
        result = flash_load(source, dest, "bench/model", settings)
        seconds = time.perf_counter() - started
        assert not result.reused
        shutil.rmtree(result.path)
        return seconds

    return run


def cp(source: Path, dest: Path) -> Callable[[], float]:
    """A timed ``cp -r`` of the source into ``dest``; seconds."""

    def run() -> float:
        target = dest / "cp-copy"
        started = time.perf_counter()
        subprocess.run(["cp", "-r", str(source), str(target)], check=True)
        seconds = time.perf_counter() - started
        shutil.rmtree(target)
        return seconds

    return run


def rounds(contenders: dict[str, Callable[[], float]], count: int) -> list[dict[str, float]]:
    """Seconds of every contender per round; the order reverses every other round."""
    names = list(contenders)
    measured = []
    for index in range(count):
        order = names if index % 2 == 0 else names[::-1]
        measured.append({name: contenders[name]() for name in order})
    return measured


def report(measured: list[dict[str, float]], size: int, method: str) -> None:
    """GB/s of each contender and ours/cp ratios, medians over the rounds."""
    for name in measured[0]:
        rates = sorted(size / r[name] / 1e9 for r in measured)
        median = statistics.median(rates)
        line = f"{name:<26} {median:6.2f} GB/s (rounds {rates[0]:.2f}-{rates[-1]:.2f})"
        if name != "cp -r":
            ratios = sorted(r["cp -r"] / r[name] for r in measured)
            line += (f"  ours/cp {statistics.median(ratios):.2f}x "
                     f"(rounds {ratios[0]:.2f}-{ratios[-1]:.2f})")  # fmt: skip
        print(line)
    print(f"copy method chosen by auto: {method}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=512, help="total size of the shards")
    parser.add_argument("--shards", type=int, default=4, help="safetensors files")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
    parser.add_argument("--workers", default="1,4", help="comma-separated worker counts")
    parser.add_argument("--methods", default="auto", help="comma-separated copy methods")
    args = parser.parse_args()
    shard = args.size_mb * MIB // args.shards
    with tempfile.TemporaryDirectory(prefix="flexinfer-bench-src-") as tmp:
        source = make_model(Path(tmp) / "model", [shard] * args.shards, small_files=6)
        size = sum(p.stat().st_size for p in source.rglob("*") if p.is_file())
        os.sync()  # write the generated files back now, not in the middle of a round
        warm(source)
        dest = destination(size)
        try:
            probe = flash_load(source, dest, "bench/model", FlashLoadSettings(margin_mb=0))
            shutil.rmtree(probe.path)
            contenders = {
                f"ours ({method}, {n} workers)": ours(source, dest, int(n), method)
                for method in args.methods.split(",")
                for n in args.workers.split(",")
            }
            contenders["cp -r"] = cp(source, dest)
            load = os.getloadavg()[0]
            print(f"{size / MIB:.0f} MiB in {args.shards} shards + json, {source} -> {dest}, "
                  f"{args.rounds} rounds, {os.cpu_count()} CPUs, load {load:.1f}")  # fmt: skip
            measured = rounds(contenders, args.rounds)
            report(measured, size, probe.method)
            print(f"load average after: {os.getloadavg()[0]:.1f}")
        finally:
            shutil.rmtree(dest, ignore_errors=True)


if __name__ == "__main__":
    main()
