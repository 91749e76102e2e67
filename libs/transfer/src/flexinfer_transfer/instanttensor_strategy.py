"""InstantTensorStrategy: the engine's own instanttensor loading (e.g. vLLM's
``--load-format instanttensor``), which reads safetensors straight onto CUDA.

The weight iterator comes from the engine adapter, as in ModelExpress: the library has no
engine-neutral entry point, and it needs a CUDA device.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch

from flexinfer_transfer.optional_packages import missing_package
from flexinfer_transfer.strategy import Availability, LoadContext, LoadResult, LoadStrategy

WeightIter = Callable[[LoadContext], Iterable[tuple[str, torch.Tensor]]]


class InstantTensorStrategy(LoadStrategy):
    """Loads through an engine-provided instanttensor weight iterator."""

    name = "instanttensor"

    def __init__(self, weight_iter: WeightIter | None = None) -> None:
        self.weight_iter = weight_iter

    def is_available(self, ctx: LoadContext) -> Availability:
        """Needs the package, a CUDA device and an engine that builds the iterator."""
        reason = missing_package("instanttensor")
        if reason is None and not ctx.device.startswith("cuda"):
            reason = f"instanttensor needs a CUDA device (this load is on {ctx.device})"
        if reason is None and self.weight_iter is None:
            reason = "the engine adapter provides no instanttensor weight iterator"
        return Availability.no(reason) if reason else Availability.yes()

    def load(self, ctx: LoadContext) -> LoadResult:
        """Every tensor the engine's iterator yields."""
        assert self.weight_iter is not None
        return LoadResult(dict(self.weight_iter(ctx)), str(ctx.model_dir))
