"""Tensor-parallel-aware reading: a rank reads only its shard's byte ranges of each
tensor, instead of the whole tensor followed by a slice (ModelExpress #448)."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from flexinfer_common.errors import PermanentError
from flexinfer_transfer.posix_reader import open_file, pread_exact
from flexinfer_transfer.safetensors_format import TensorEntry, read_header
from flexinfer_transfer.sharding import ShardSpec


@dataclass(frozen=True)
class ShardRead:
    """A rank's tensors and how many file bytes it read to get them."""

    tensors: dict[str, torch.Tensor]
    bytes_read: int


def byte_ranges(entry: TensorEntry, dim: int, spec: ShardSpec) -> list[tuple[int, int]]:
    """(file offset, length) of rank ``spec.rank``'s slice of ``entry`` split on ``dim``."""
    shape = entry.shape
    if dim >= len(shape) or shape[dim] % spec.world_size:
        raise PermanentError(
            f"tensor {entry.name!r} of shape {list(shape)} cannot be split {spec.world_size} "
            f"ways on dim {dim}"
        )
    itemsize = entry.nbytes // max(1, math.prod(shape))
    inner = math.prod(shape[dim + 1 :]) * itemsize
    block = shape[dim] // spec.world_size * inner
    stride = shape[dim] * inner
    outer = math.prod(shape[:dim])
    first = entry.start + spec.rank * block
    return [(first + i * stride, block) for i in range(outer)]


def read_shard(paths: list[Path], spec: ShardSpec) -> ShardRead:
    """Rank ``spec.rank``'s tensors of ``paths``: split tensors sliced, others whole."""
    tensors: dict[str, torch.Tensor] = {}
    total = 0
    for path in paths:
        fd = open_file(path)
        try:
            for entry in read_header(path, fd).entries:
                if entry.name in tensors:
                    raise PermanentError(f"{path}: tensor {entry.name!r} appears twice")
                tensor, read = _read_entry(fd, entry, spec)
                tensors[entry.name] = tensor
                total += read
        finally:
            os.close(fd)
    return ShardRead(tensors, total)


def _read_entry(fd: int, entry: TensorEntry, spec: ShardSpec) -> tuple[torch.Tensor, int]:
    dim = spec.split_dim(entry.name)
    if dim is None or not entry.shape:
        shape, ranges = entry.shape, [(entry.start, entry.nbytes)]
    else:
        shape = (*entry.shape[:dim], entry.shape[dim] // spec.world_size, *entry.shape[dim + 1 :])
        ranges = byte_ranges(entry, dim, spec)
    out = torch.empty(shape, dtype=entry.dtype)
    flat = out.reshape(-1).view(torch.uint8).numpy().data if out.numel() else None
    done = 0
    for offset, length in ranges:
        if flat is not None and length:
            pread_exact(fd, flat[done : done + length], offset)
        done += length
    return out, done
