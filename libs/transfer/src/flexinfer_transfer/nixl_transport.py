"""NixlTransport: the PeerTransport RdmaStrategy uses, over a NixlTransferManager.

A receive fetches the source's manifest, checks it against the target's discovered
tensors (ManifestMismatchError on any difference), registers the target's memory (one
registration per contiguous pool), loads the source agent's metadata and READs the regions
in batches. Whatever fails on the way, a dead donor included, becomes SourceTransferError,
so RdmaStrategy tries the next source and the chain the next strategy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import torch
from torch import nn

from flexinfer_transfer.accelerators import MX_SOURCE_TYPE_WEIGHTS, accelerators_compatible
from flexinfer_transfer.directory import SourceDirectory, SourceManifest
from flexinfer_transfer.discovery import ManifestEntry, check_manifest, discover_tensors
from flexinfer_transfer.errors import SourceTransferError
from flexinfer_transfer.metrics import TransferMetrics
from flexinfer_transfer.nixl_manager import NixlTransferManager
from flexinfer_transfer.pools import Region, memory_type, tensor_region
from flexinfer_transfer.selector import SourceCandidate
from flexinfer_transfer.strategy import LoadContext

BATCH_BYTES = 256 << 20
"""Bytes per READ request: large enough that per-request cost vanishes (CMA moves 64 MiB
and more at full speed), small enough that progress is reported and a dead donor is
noticed between batches."""


PULLED = b"flexinfer:pulled"
"""The notification a source receives when a target finished reading its tensors."""


class IncompatibleSourceError(RuntimeError):
    """The source's accelerator cannot serve this worker's weights."""


class ModuleHolder(Protocol):
    """The target: the live module tensors are written into."""

    @property
    def module(self) -> nn.Module:
        """The module (a target may build it on first use)."""


Progress = Callable[[int, int], None]
"""Called after each READ batch with (bytes done, bytes in all)."""


@dataclass
class NixlTransport:
    """PeerTransport over NIXL."""

    manager: NixlTransferManager
    directory: SourceDirectory
    target: ModuleHolder
    pooled: bool = True
    batch_bytes: int = BATCH_BYTES
    progress: Progress | None = None
    metrics: TransferMetrics | None = None
    name: str = "nixl"
    received_from: list[str] = field(default_factory=list)

    def list_sources(self, ctx: LoadContext) -> list[SourceCandidate]:
        """READY sources, from the directory."""
        return self.directory.list_sources(ctx)

    def receive(self, candidate: SourceCandidate, ctx: LoadContext) -> dict[str, torch.Tensor]:
        """Every tensor of ``candidate``, READ into the target's tensors."""
        try:
            manifest = self.directory.manifest(candidate)
            _check_accelerator(manifest, ctx)
            want = discover_tensors(self.target.module)
            check_manifest([(t.name, t.size) for t in manifest.tensors], want)
            self._pull(manifest, want, ctx)
        except Exception as exc:
            raise SourceTransferError(f"receive from {candidate.key} failed: {exc}") from exc
        self.received_from.append(candidate.key)
        if self.metrics is not None:
            self.metrics.transfer_bytes.labels(self.name).inc(_bytes(self.target.module))
        return dict(self.target.module.state_dict())

    def _pull(self, manifest: SourceManifest, want: list[ManifestEntry], ctx: LoadContext) -> None:
        if not want:
            return
        mem_type = memory_type(want[0].tensor.device)
        local = {e.name: tensor_region(e.tensor) for e in want}
        remote = {t.name: Region(t.addr, t.size, t.device_id) for t in manifest.tensors}
        registration = self.manager.register(list(local.values()), mem_type, pooled=self.pooled)
        peer = ""
        try:
            peer = (
                self.manager.connect(manifest.agent_metadata)
                if manifest.agent_metadata
                else self.manager.fetch_metadata(manifest.agent_name, manifest.metadata_endpoint)
            )
            ctx.target_mutated = True
            total = sum(r.size for r in local.values())
            done = 0
            batches = _batches(want, self.batch_bytes)
            for index, names in enumerate(batches):
                # The last READ carries a notification: the source learns a pull completed.
                note = PULLED if index == len(batches) - 1 else b""
                self.manager.read(
                    peer, [local[n] for n in names], [remote[n] for n in names], mem_type, note
                )
                done += sum(local[n].size for n in names)
                if self.progress is not None:
                    self.progress(done, total)
        finally:
            if peer:
                self.manager.disconnect(peer)
            self.manager.release(registration)


def _batches(entries: list[ManifestEntry], limit: int) -> list[list[str]]:
    batches: list[list[str]] = [[]]
    size = 0
    for entry in entries:
        if batches[-1] and size + entry.size > limit:
            batches.append([])
            size = 0
        batches[-1].append(entry.name)
        size += entry.size
    return batches


def _check_accelerator(manifest: SourceManifest, ctx: LoadContext) -> None:
    """The authoritative, post-fetch compatibility check: a source listed without its
    accelerator (the k8s-service backend's synthetic one) is judged here."""
    if not accelerators_compatible(
        manifest.accelerator,
        ctx.accelerator,
        post_fetch=True,
        mx_source_type=MX_SOURCE_TYPE_WEIGHTS,
        quantization=ctx.quantization,
        dtype=ctx.dtype,
    ):
        raise IncompatibleSourceError(
            f"source accelerator {manifest.accelerator or 'unknown'!r} cannot serve a "
            f"{ctx.accelerator or 'unknown'!r} worker (quantization {ctx.quantization!r}, "
            f"dtype {ctx.dtype!r})"
        )


def _bytes(module: nn.Module) -> int:
    return sum(entry.size for entry in discover_tensors(module))
