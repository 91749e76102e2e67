"""Which slice of each tensor a tensor-parallel rank holds."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

import torch

from flexinfer_common.errors import PermanentError


@dataclass(frozen=True)
class ShardSpec:
    """Rank ``rank`` of ``world_size``; ``rules`` map tensor-name patterns (fnmatch) to the
    dimension split evenly across ranks. The first matching rule wins; a tensor no rule
    matches is replicated (every rank reads it whole).

    Splitting dim 0 (the rows of a ``[out, in]`` weight, Megatron's column-parallel linear)
    is one contiguous byte range per rank; splitting dim 1 (the columns, a row-parallel
    linear) is one range per row, strided through the tensor.
    """

    rank: int
    world_size: int
    rules: tuple[tuple[str, int], ...] = ()

    def __post_init__(self) -> None:
        if self.world_size < 1 or not 0 <= self.rank < self.world_size:
            raise ValueError(f"rank {self.rank} is not in a world of {self.world_size}")
        if any(dim < 0 for _, dim in self.rules):
            raise ValueError("split dimensions must be >= 0")

    def split_dim(self, name: str) -> int | None:
        """The dimension ``name`` is split on, or None when it is replicated."""
        for pattern, dim in self.rules:
            if fnmatch.fnmatchcase(name, pattern):
                return dim
        return None


def slice_shard(name: str, tensor: torch.Tensor, spec: ShardSpec) -> torch.Tensor:
    """``spec.rank``'s slice of an already loaded tensor (a contiguous copy)."""
    dim = spec.split_dim(name)
    if dim is None or tensor.dim() == 0:
        return tensor
    if dim >= tensor.dim() or tensor.shape[dim] % spec.world_size:
        raise PermanentError(
            f"tensor {name!r} of shape {list(tensor.shape)} cannot be split "
            f"{spec.world_size} ways on dim {dim}"
        )
    return tensor.chunk(spec.world_size, dim)[spec.rank].contiguous()
