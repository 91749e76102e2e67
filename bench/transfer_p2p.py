"""P2P section of bench/transfer.py: NIXL READ between two processes over UCX.

A donor process holds a model of ``--p2p-mb`` MiB in ``--p2p-tensors`` tensors laid out in
2 contiguous pools (as the POSIX reader lays out a 2-shard checkpoint) and serves it through
a NixlSource; it prints its manifest as JSON. This process then pulls it, interleaved and
in alternating order, ``--rounds`` times with each contender:

- ours: ``NixlTransport.receive`` into a model of the same layout, pooled registration
  (register the target, load the donor's metadata, READ in batches, deregister);
- ours-per-tensor: the same against a donor that registered each tensor, and registering
  each target tensor;
- raw: the nixl API written out here: register one destination buffer, load the donor's
  metadata, one READ of the donor's two pools, deregister (the same bytes);
- memcpy: a local ``copy_`` of the same bytes between two buffers in this process.

Every contender's clock includes its registration; registration alone is timed too, per
tensor against pooled. Reports GB/s (median, min-max) and the median per-round ratio
ours/raw (the goal: at least 0.8).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from flexinfer_transfer import LoadContext, SourceCandidate
from flexinfer_transfer.directory import RemoteTensor, SourceManifest
from flexinfer_transfer.nixl_manager import NixlTransferManager
from flexinfer_transfer.nixl_source import NixlSource
from flexinfer_transfer.nixl_transport import NixlTransport
from flexinfer_transfer.pools import Region, pools, tensor_region

MIB = 1 << 20


class PooledModel(nn.Module):
    """``count`` float32 parameters of ``size_mb`` MiB in all, views into 2 buffers."""

    def __init__(self, size_mb: int, count: int) -> None:
        super().__init__()
        per = size_mb * MIB // 4 // count
        self.pools = [torch.empty(per * (count // 2 + count % 2)), torch.empty(per * (count // 2))]
        for i in range(count):
            pool, slot = self.pools[i % 2], i // 2
            view = pool[slot * per : (slot + 1) * per]
            self.register_parameter(f"w{i:04d}", nn.Parameter(view, requires_grad=False))


def donor_main(size_mb: int, count: int, per_tensor: bool) -> None:
    """Serve a PooledModel until stdin closes (run as ``transfer_p2p.py donor ...``)."""
    model = PooledModel(size_mb, count)
    for i, pool in enumerate(model.pools):
        pool.copy_(torch.arange(pool.numel(), dtype=torch.float32) + i)
    manager = NixlTransferManager(f"bench-donor-{per_tensor}")
    started = time.perf_counter()
    source = NixlSource(manager, model, pooled=not per_tensor)
    seconds = time.perf_counter() - started
    manifest = source.manifest()
    print(
        json.dumps(
            {
                "agent": manifest.agent_name,
                "metadata": manifest.agent_metadata.hex(),
                "tensors": [[t.name, t.addr, t.size] for t in manifest.tensors],
                "register_s": seconds,
                "registrations": len(source.registration.regions),
            }
        ),
        flush=True,
    )
    sys.stdin.read()
    source.close()


@dataclass
class Donor:
    """A donor process and its manifest."""

    proc: subprocess.Popen[str]
    manifest: SourceManifest
    register_s: float
    registrations: int

    @property
    def candidate(self) -> SourceCandidate:
        """This donor as a source."""
        return SourceCandidate("bench", self.manifest.agent_name)


class _Directory:
    """A SourceDirectory of one donor (the bench measures the transfer, not discovery)."""

    def __init__(self, donor: Donor) -> None:
        self.donor = donor

    def list_sources(self, ctx: LoadContext) -> list[SourceCandidate]:
        return [self.donor.candidate]

    def manifest(self, candidate: SourceCandidate) -> SourceManifest:
        return self.donor.manifest


def start_donor(size_mb: int, count: int, per_tensor: bool) -> Donor:
    """Start a donor process; returns once it printed its manifest."""
    args = [sys.executable, __file__, "donor", str(size_mb), str(count), str(int(per_tensor))]
    proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("{"):
            data = json.loads(line)
            tensors = [RemoteTensor(n, a, s) for n, a, s in data["tensors"]]
            manifest = SourceManifest(data["agent"], bytes.fromhex(data["metadata"]), tensors)
            return Donor(proc, manifest, data["register_s"], data["registrations"])
    raise RuntimeError("the donor process exited before serving")


class _Holder:
    def __init__(self, module: nn.Module) -> None:
        self.module = module


def ours(donor: Donor, target: PooledModel, pooled: bool) -> Callable[[], int]:
    """NixlTransport.receive into ``target`` (a fresh manager per contender)."""
    transport = NixlTransport(
        NixlTransferManager(f"bench-ours-{pooled}"),
        _Directory(donor),
        _Holder(target),
        pooled=pooled,
    )
    ctx = LoadContext(Path(__file__))

    def run() -> int:
        transport.receive(donor.candidate, ctx)
        return sum(p.numel() * 4 for p in target.pools)

    return run


def raw(donor: Donor, size: int) -> Callable[[], int]:
    """The nixl API by hand: register a buffer, load metadata, one READ, deregister."""
    from nixl._api import (  # type: ignore[import-untyped, import-not-found, unused-ignore]
        nixl_agent,
        nixl_agent_config,
    )

    agent = nixl_agent("bench-raw", nixl_agent_config(enable_prog_thread=False))
    remote = pools(Region(t.addr, t.size) for t in donor.manifest.tensors)
    dst = torch.empty(sum(r.size for r in remote) // 4)
    dst.fill_(0)

    def run() -> int:
        reg = agent.register_memory([(dst.data_ptr(), dst.numel() * 4, 0, "")], "DRAM")
        peer = agent.add_remote_agent(donor.manifest.agent_metadata)
        local, offset = [], dst.data_ptr()
        for r in remote:
            local.append((offset, r.size, 0))
            offset += r.size
        handle = agent.initialize_xfer(
            "READ",
            agent.get_xfer_descs(local, "DRAM"),
            agent.get_xfer_descs([(r.addr, r.size, 0) for r in remote], "DRAM"),
            peer,
        )
        state = agent.transfer(handle)
        while state == "PROC":
            state = agent.check_xfer_state(handle)
        assert state == "DONE", state
        agent.release_xfer_handle(handle)
        agent.remove_remote_agent(peer)
        agent.deregister_memory(reg)
        return sum(r.size for r in remote)

    return run


def memcpy(size_mb: int) -> Callable[[], int]:
    """A local copy of the same bytes."""
    src = torch.ones(size_mb * MIB // 4)
    dst = torch.zeros_like(src)

    def run() -> int:
        dst.copy_(src)
        return src.numel() * 4

    return run


def registration(count: int, size_mb: int, repeats: int = 7) -> dict[str, float]:
    """Median seconds to register a PooledModel's tensors pooled and per tensor, and the
    metadata size each leaves (alternating, after one warm-up of each)."""
    manager = NixlTransferManager("bench-reg")
    model = PooledModel(size_mb, count)
    regions = [tensor_region(p) for p in model.parameters()]
    times: dict[str, list[float]] = {"pooled": [], "per-tensor": []}
    out: dict[str, float] = {}
    for attempt in range(repeats + 1):
        for name, pooled in (("pooled", True), ("per-tensor", False)):
            started = time.perf_counter()
            reg = manager.register(regions, "DRAM", pooled=pooled)
            if attempt:
                times[name].append(time.perf_counter() - started)
            out[f"{name}-metadata-bytes"] = len(manager.metadata())
            manager.release(reg)
    return out | {name: statistics.median(values) for name, values in times.items()}


def run_p2p(size_mb: int, count: int, rounds: int) -> None:
    """The P2P section: start donors, run interleaved rounds, print the table."""
    pooled_donor = start_donor(size_mb, count, per_tensor=False)
    single_donor = start_donor(size_mb, count, per_tensor=True)
    try:
        contenders: dict[str, Callable[[], int]] = {
            "ours": ours(pooled_donor, PooledModel(size_mb, count), pooled=True),
            "ours-per-tensor": ours(single_donor, PooledModel(size_mb, count), pooled=False),
            "raw": raw(pooled_donor, size_mb * MIB),
            "memcpy": memcpy(size_mb),
        }
        for run in contenders.values():
            run()  # first touch of every buffer and connection, outside the clock
        rates: dict[str, list[float]] = {name: [] for name in contenders}
        for round_ in range(rounds):
            names = list(contenders) if round_ % 2 == 0 else list(reversed(contenders))
            for name in names:
                started = time.perf_counter()
                nbytes = contenders[name]()
                rates[name].append(nbytes / (time.perf_counter() - started) / 1e9)
        _print(rates, pooled_donor, single_donor, registration(count, size_mb))
    finally:
        for donor in (pooled_donor, single_donor):
            donor.proc.communicate(timeout=60)


def _print(
    rates: dict[str, list[float]], pooled: Donor, single: Donor, reg: dict[str, Any]
) -> None:
    for name, values in rates.items():
        print(
            f"{name:16s} median {statistics.median(values):5.2f} GB/s "
            f"(min {min(values):.2f}, max {max(values):.2f})"
        )
    for peer in ("raw", "memcpy"):
        ratios = [o / p for o, p in zip(rates["ours"], rates[peer], strict=True)]
        print(f"ours / {peer:6s} median {statistics.median(ratios):.2f}")
    per = [o / p for o, p in zip(rates["ours"], rates["ours-per-tensor"], strict=True)]
    print(f"ours / ours-per-tensor median {statistics.median(per):.2f}")
    print(
        f"donor registration: pooled {pooled.registrations} regions in "
        f"{pooled.register_s * 1e3:.1f} ms, per-tensor {single.registrations} regions in "
        f"{single.register_s * 1e3:.1f} ms"
    )
    print(
        f"target registration (median of 7): pooled {reg['pooled'] * 1e3:.2f} ms "
        f"({reg['pooled-metadata-bytes']} B metadata), per-tensor {reg['per-tensor'] * 1e3:.2f} ms "
        f"({reg['per-tensor-metadata-bytes']} B metadata)"
    )


if __name__ == "__main__" and sys.argv[1:2] == ["donor"]:
    donor_main(int(sys.argv[2]), int(sys.argv[3]), bool(int(sys.argv[4])))
