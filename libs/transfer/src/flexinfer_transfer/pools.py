"""Memory pools: the address ranges a transfer manager registers.

Registering each tensor costs one registration (``ibv_reg_mr`` on RDMA NICs, a key in the
agent's metadata blob) per tensor; a model of a few hundred tensors usually lives in far
fewer allocations (one buffer per checkpoint file when the gds/POSIX path loaded it, the
caching allocator's segments on CUDA). ``pools`` merges regions whose address ranges touch
or overlap into one pool each, so a model is registered once per contiguous pool.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Region:
    """An address range in one device's memory."""

    addr: int
    size: int
    device_id: int = 0

    @property
    def end(self) -> int:
        """One past the last byte."""
        return self.addr + self.size


def tensor_region(tensor: torch.Tensor) -> Region:
    """The bytes of a contiguous tensor."""
    device_id = tensor.get_device()
    return Region(tensor.data_ptr(), tensor.numel() * tensor.element_size(), max(device_id, 0))


def pools(regions: Iterable[Region]) -> list[Region]:
    """Maximal runs of touching or overlapping regions, per device, by address."""
    merged: list[Region] = []
    for region in sorted(regions, key=lambda r: (r.device_id, r.addr)):
        if region.size == 0:
            continue
        last = merged[-1] if merged else None
        if last is not None and last.device_id == region.device_id and region.addr <= last.end:
            merged[-1] = Region(last.addr, max(last.end, region.end) - last.addr, last.device_id)
        else:
            merged.append(region)
    return merged


MEMORY_TYPES = {"cpu": "DRAM", "cuda": "VRAM"}
"""NIXL's memory segment per torch device type: the one place the choice is made (host
DRAM over UCX here, GPU memory where CUDA exists)."""


def memory_type(device: torch.device | str) -> str:
    """NIXL's memory type for tensors on ``device``."""
    kind = torch.device(device).type
    if kind not in MEMORY_TYPES:
        raise ValueError(
            f"no NIXL memory type for {kind!r} tensors (known: {sorted(MEMORY_TYPES)})"
        )
    return MEMORY_TYPES[kind]
