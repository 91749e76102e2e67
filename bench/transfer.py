"""Weight loading benchmark: our strategy chain against safetensors and a raw read ceiling.

A safetensors checkpoint of ``--size-mb`` (bf16 tensors in ``--shards`` files) is
generated under /tmp (never committed), read once so every run finds it in the page cache,
then loaded ``--rounds`` times by each contender, interleaved and in alternating order so
the machine's drift hits all alike. "Loaded" means in private memory and touched, not
lazily mmapped:

- chain: ``LoadStrategyChain`` with the default order and settings (the strategy it picks
  is printed; on CPU without NIXL it is ``gds``, the POSIX reader);
- chain+thp: the same with transparent huge pages asked for (informational);
- chain-1thread: the same with one reader thread (informational: what the second adds);
- chain-noprefault: the same without the cold path's prefaulter (informational: the reader
  before 2026-12-04, two interleaved threads faulting their own pages, cold or warm);
- chain+direct: the same with O_DIRECT for chunks the page cache lacks (informational);
- safetensors: ``safetensors.torch.load_file`` per shard, each tensor cloned;
- ceiling: one ``readinto`` per file into a buffer allocated before the clock starts but
  not yet touched (so it pays the same page faults every loader pays);
- copy-bound: the same into buffers already faulted in (what the copy alone costs);
- touch-bound: fresh buffers written once with torch's threads, reading nothing (what
  faulting in and writing that much fresh private memory costs: no loader beats it);
- runai, runai-tuned, fastsafetensors: the peers, each in a worker process of their own
  venv (bench/transfer_peers.py; ``--setup`` creates it), where it exists. runai-tuned is
  runai-model-streamer with the setting that was fastest here (sync_buffered, 2 threads).

Reports GB/s (decimal) per contender (median, min-max, every round) and the medians of the
per-round ratios of the chain to each other contender.

``--memory-history`` sets what every load starts from. On these VMs a load on huge pages is
fast only on memory that another huge-page process has just freed, so a contender's figure
would depend on which one ran before it. Before each load a throwaway process faults in as
many bytes as the checkpoint holds, on small pages (``small-pages``, the default: what most
processes leave) or huge pages (``huge-pages``), and exits; ``as-run`` skips it (the bench
before 2026-12-04, 16:30 UTC).

``--cache cold`` evicts the checkpoint from the page cache before every load
(``posix_fadvise(DONTNEED)`` on its files, which needs no root, unlike drop_caches) and
prints how much of it ``fincore`` still finds resident.

The P2P section (``--section p2p``; bench/transfer_p2p.py) pulls a model between two
processes over NIXL/UCX and compares with a raw NIXL READ and a local memcpy. The
warm-start section (``--section warmstart``; bench/transfer_warmstart.py) times a second
engine replica to ready through P2P, from the cache directory and through the registry's
StreamModelFiles.

    python bench/transfer.py --setup       # once: the peers' venv in bench/.venvs/
    python bench/transfer.py [--section all|loader|p2p|warmstart] [--size-mb 1200]
        [--shards 2] [--rounds 5] [--cache warm|cold] [--p2p-mb 512] [--p2p-tensors 256]
        [--warm-preset medium] [--warm-rounds 3] [--reuse-peer-worker]
        [--memory-history small-pages|huge-pages|as-run]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import torch
from prometheus_client import CollectorRegistry
from safetensors.torch import load_file, save_file
from transfer_p2p import run_p2p
from transfer_warmstart import run_warmstart

from flexinfer_transfer import (
    DEFAULT_ORDER,
    LoadContext,
    ReaderSettings,
    StrategyParts,
    TransferMetrics,
    create_selector,
    create_strategy_chain,
)

MIB = 1 << 20
HERE = Path(__file__).resolve().parent
PEER_VENV = HERE / ".venvs" / "transfer-peers"
PEER_PACKAGES = ["torch==2.13.0", "safetensors", "runai-model-streamer", "fastsafetensors"]


class Loaded(NamedTuple):
    """One load: its bytes, the strategy that ran, what holds the memory until the clock has
    stopped, and the seconds a worker process measured itself (None: time it here)."""

    nbytes: int
    strategy: str
    kept: object
    seconds: float | None = None
    faults: int | None = None
    """Minor page faults a worker process counted around its load (None: count them here)."""


TENSOR_SHAPE = (4096, 4096)  # 32 MiB in bf16: a 7B-class projection


def generate(root: Path, size_mb: int, shards: int) -> list[Path]:
    """A sharded bf16 checkpoint of about ``size_mb`` MiB under ``root``."""
    per_tensor = TENSOR_SHAPE[0] * TENSOR_SHAPE[1] * 2
    count = max(shards, size_mb * MIB // per_tensor)
    base = torch.randint(0, 256, (per_tensor,), dtype=torch.uint8)
    paths: list[Path] = []
    weight_map: dict[str, str] = {}
    for shard in range(shards):
        name = f"model-{shard + 1:05d}-of-{shards:05d}.safetensors"
        tensors = {
            f"layers.{i}.proj.weight": base.roll(i).view(torch.bfloat16).view(TENSOR_SHAPE)
            for i in range(shard, count, shards)
        }
        save_file(tensors, root / name)
        weight_map |= dict.fromkeys(tensors, name)
        paths.append(root / name)
    (root / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    return paths


def warm(paths: list[Path]) -> None:
    """Read every file once so each run finds it page-cached."""
    for path in paths:
        with path.open("rb", buffering=0) as handle:
            while handle.read(64 * MIB):
                pass


def chain_loader(
    root: Path, hugepages: bool, threads: int = 2, direct: bool = False, prefault: bool = True
) -> Callable[[], Loaded]:
    """Our chain with default order and the given reader settings."""
    reader = ReaderSettings(
        threads=threads, hugepages=hugepages, direct=direct, prefault_cold=prefault
    )
    parts = StrategyParts(TransferMetrics(CollectorRegistry()), create_selector("random"), reader)
    chain = create_strategy_chain(DEFAULT_ORDER, parts)

    def run() -> Loaded:
        report = chain.run(LoadContext(root))
        total = sum(t.numel() * t.element_size() for t in report.tensors.values())
        return Loaded(total, report.strategy, report.tensors)

    return run


def safetensors_loader(paths: list[Path]) -> Callable[[], Loaded]:
    """load_file per shard, every tensor cloned into private memory."""

    def run() -> Loaded:
        kept = [t.clone() for path in paths for t in load_file(path).values()]
        return Loaded(sum(t.numel() * t.element_size() for t in kept), "safetensors", kept)

    return run


def readinto(paths: list[Path], prefault: bool) -> Callable[[], Loaded]:
    """One readinto per file into a buffer allocated before timing (faulted if asked)."""
    sizes = [p.stat().st_size for p in paths]
    state: dict[str, list[torch.Tensor]] = {}

    def prepare() -> None:
        state["bufs"] = [torch.empty(s, dtype=torch.uint8) for s in sizes]
        if prefault:
            for buf in state["bufs"]:
                buf.fill_(1)

    def run() -> Loaded:
        total = 0
        bufs = state.pop("bufs")
        for path, buf in zip(paths, bufs, strict=True):
            with path.open("rb", buffering=0) as handle:
                total += handle.readinto(buf.numpy().data) or 0
        return Loaded(total, "readinto", bufs)

    run.prepare = prepare  # type: ignore[attr-defined]
    return run


def touch_bound(paths: list[Path]) -> Callable[[], Loaded]:
    """Fresh buffers of the files' sizes, allocated and written once inside the clock with
    torch's threads (``fill_``), reading nothing: the least any loader pays to put that
    many bytes in fresh private memory (one fault and one write per page), so a ceiling."""
    sizes = [p.stat().st_size for p in paths]

    def run() -> Loaded:
        bufs = [torch.empty(s, dtype=torch.uint8) for s in sizes]
        for buf in bufs:
            buf.fill_(1)
        return Loaded(sum(sizes), "fill", bufs)

    return run


class PeerWorker:
    """bench/transfer_peers.py in the peers' venv: loads on request, each timed there."""

    def __init__(self, *, fresh: bool = True) -> None:
        self.fresh = fresh
        """A new worker process for every load (else one for all: see transfer_peers)."""
        self.proc = self._start()

    @staticmethod
    def _start() -> subprocess.Popen[str]:
        """A worker that has imported the peers (it says so in its first line), so that
        nothing it does at start overlaps what runs next."""
        proc = subprocess.Popen(
            [str(PEER_VENV / "bin" / "python"), str(HERE / "transfer_peers.py")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        if json.loads(proc.stdout.readline() or "{}").get("ready") is not True:
            raise RuntimeError("the peers' worker exited before it was ready")
        return proc

    def loader(self, peer: str, paths: list[Path]) -> Callable[[], Loaded]:
        """A contender that asks the worker for one load by ``peer``."""

        def prepare() -> None:
            if self.fresh:
                self.close()
                self.proc = self._start()

        def run() -> Loaded:
            assert self.proc.stdin is not None
            assert self.proc.stdout is not None
            request = {"peer": peer, "files": [str(p) for p in paths]}
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
            answer = json.loads(self.proc.stdout.readline() or '{"error": "worker exited"}')
            if "error" in answer:
                raise RuntimeError(f"{peer}: {answer['error']}")
            return Loaded(answer["bytes"], peer, None, answer["seconds"], answer["faults"])

        run.prepare = prepare  # type: ignore[attr-defined]
        return run

    def close(self) -> None:
        """End the worker (it exits when its stdin closes)."""
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(30)


def setup() -> int:
    """Create the peers' venv (torch pinned to the CPU build this machine has)."""
    if not (PEER_VENV / "bin" / "python").exists():
        subprocess.run([sys.executable, "-m", "venv", str(PEER_VENV)], check=True)
    pip = [str(PEER_VENV / "bin" / "pip"), "install", "-q", *PEER_PACKAGES]
    print(f"installing {' '.join(PEER_PACKAGES)} into {PEER_VENV}", flush=True)
    return subprocess.run(pip, check=False).returncode


def evict(paths: list[Path]) -> None:
    """Drop the files' pages from the page cache (their pages are clean: no root needed)."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def resident_bytes(paths: list[Path]) -> int | None:
    """How much of the files the page cache holds, by util-linux's fincore (None: absent)."""
    if shutil.which("fincore") is None:
        return None
    out = subprocess.run(
        ["fincore", "--bytes", "--noheadings", "--output", "RES", *map(str, paths)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return sum(int(v) for v in out.split())


def minor_faults() -> int:
    """This process's minor page faults so far, every thread's."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


HISTORIES = ("small-pages", "huge-pages", "as-run")
_OCCUPY = """
import mmap, sys
size, huge = int(sys.argv[1]), sys.argv[2] == "huge-pages"
region = mmap.mmap(-1, size)
if huge:
    region.madvise(mmap.MADV_HUGEPAGE)
for offset in range(0, size, mmap.PAGESIZE):
    region[offset] = 1
"""


def condition(history: str, nbytes: int) -> None:
    """Leave free memory as a process that used ``nbytes`` on that kind of page leaves it
    when it exits (see ``--memory-history``); "as-run" leaves it as the last load did."""
    if history != "as-run":
        subprocess.run([sys.executable, "-c", _OCCUPY, str(nbytes), history], check=True)


def timed(
    contender: Callable[[], Loaded],
    cold: list[Path] | None,
    history: tuple[str, int],
) -> tuple[float, str, int]:
    """GB/s of one run, the strategy that ran and the minor page faults it took (memory
    an allocator reuses from an earlier round takes none). What was loaded is freed after
    the clock stops: unmapping a gigabyte costs about as much as faulting it in. With
    ``cold``, those files leave the page cache first; ``history``: see ``condition``."""
    if cold is not None:
        evict(cold)
    prepare = getattr(contender, "prepare", None)
    if prepare is not None:
        prepare()
    condition(*history)
    gc.collect()
    faults = minor_faults()
    started = time.perf_counter()
    nbytes, strategy, kept, measured, counted = contender()
    seconds = measured or time.perf_counter() - started
    faults = counted if counted is not None else minor_faults() - faults
    del kept
    gc.collect()
    return nbytes / seconds / 1e9, strategy, faults


def main() -> None:
    """Generate, warm, run interleaved rounds, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mb", type=int, default=1200)
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--section", choices=["all", "loader", "p2p", "warmstart"], default="all")
    parser.add_argument("--cache", choices=["warm", "cold"], default="warm")
    parser.add_argument("--setup", action="store_true", help="create the peers' venv, then exit")
    parser.add_argument("--p2p-mb", type=int, default=512)
    parser.add_argument("--p2p-tensors", type=int, default=256)
    parser.add_argument("--warm-preset", default="medium")
    parser.add_argument("--warm-rounds", type=int, default=3)
    parser.add_argument(
        "--reuse-peer-worker",
        action="store_true",
        help="one peers' worker for every load (it reuses the memory of its earlier loads)",
    )
    parser.add_argument(
        "--memory-history",
        choices=HISTORIES,
        default="small-pages",
        help="what free memory every load starts from (see the module's docstring)",
    )
    args = parser.parse_args()
    if args.setup:
        sys.exit(setup())
    if args.section in ("all", "loader"):
        loader_section(
            args.size_mb,
            args.shards,
            args.rounds,
            cold=args.cache == "cold",
            reuse_peers=args.reuse_peer_worker,
            history=args.memory_history,
        )
    if args.section in ("all", "p2p"):
        print(f"P2P: {args.p2p_mb} MiB in {args.p2p_tensors} tensors, 2 pools")
        run_p2p(args.p2p_mb, args.p2p_tensors, args.rounds)
    if args.section in ("all", "warmstart"):
        run_warmstart(args.warm_preset, args.warm_rounds)


def loader_section(
    size_mb: int,
    shards: int,
    rounds: int,
    *,
    cold: bool = False,
    reuse_peers: bool = False,
    history: str = "small-pages",
) -> None:
    """The loader section: a generated checkpoint through every loader."""
    root = Path(tempfile.mkdtemp(prefix="flexinfer-bench-transfer-", dir="/tmp"))
    exists = (PEER_VENV / "bin" / "python").exists()
    worker = PeerWorker(fresh=not reuse_peers) if exists else None
    try:
        paths = generate(root, size_mb, shards)
        total = sum(p.stat().st_size for p in paths)
        print(f"checkpoint: {total / 1e9:.2f} GB in {len(paths)} files under {root}")
        os.sync()  # written pages must be clean before posix_fadvise can drop them
        warm(paths)
        contenders = {
            "chain": chain_loader(root, hugepages=False),
            "chain+thp": chain_loader(root, hugepages=True),
            "chain-1thread": chain_loader(root, hugepages=False, threads=1),
            "chain-noprefault": chain_loader(root, hugepages=False, prefault=False),
            "chain+direct": chain_loader(root, hugepages=False, direct=True),
            "safetensors": safetensors_loader(paths),
            "ceiling": readinto(paths, prefault=False),
            "copy-bound": readinto(paths, prefault=True),
            "touch-bound": touch_bound(paths),
        }
        if worker is None:
            print(f"no peers: run `python bench/transfer.py --setup` to create {PEER_VENV}")
        else:
            for peer in ("runai", "runai-tuned", "fastsafetensors"):
                contenders[peer] = worker.loader(peer, paths)
        if cold:
            evict(paths)
            print(f"cold: after eviction the page cache holds {resident_bytes(paths)} bytes")
        print(f"memory history before each load: {history}")
        report(contenders, rounds, paths if cold else None, (history, total))
    finally:
        if worker is not None:
            worker.close()
        shutil.rmtree(root, ignore_errors=True)


def report(
    contenders: dict[str, Callable[[], Loaded]],
    rounds: int,
    cold: list[Path] | None,
    history: tuple[str, int],
) -> None:
    """Run the rounds and print GB/s and ratios (``cold``: those files evicted each time)."""
    rates: dict[str, list[float]] = {name: [] for name in contenders}
    faults: dict[str, list[int]] = {name: [] for name in contenders}
    strategy = ""
    for round_ in range(rounds):
        names = list(contenders) if round_ % 2 == 0 else list(reversed(contenders))
        for name in names:
            rate, used, took = timed(contenders[name], cold, history)
            rates[name].append(rate)
            faults[name].append(took)
            strategy = used if name == "chain" else strategy
    print(f"chain picked: {strategy}")
    for name, values in rates.items():
        print(
            f"{name:15s} median {statistics.median(values):5.2f} GB/s "
            f"(min {min(values):.2f}, max {max(values):.2f}); "
            f"minor faults per load: {', '.join(f'{f // 1000}k' for f in faults[name])}; "
            # Round by round: every second round runs the contenders in reverse, so a figure that
            # depends on what ran just before shows here.
            f"rounds: {' '.join(f'{v:.2f}' for v in values)}"
        )
    for peer in (name for name in rates if not name.startswith("chain")):
        ratios = [c / p for c, p in zip(rates["chain"], rates[peer], strict=True)]
        print(f"chain / {peer:15s} median {statistics.median(ratios):.2f}")


if __name__ == "__main__":
    main()
