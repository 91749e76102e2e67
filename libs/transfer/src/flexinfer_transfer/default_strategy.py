"""DefaultStrategy: safetensors' own reader, the fallback that always applies."""

from __future__ import annotations

from flexinfer_transfer.checkpoint import checkpoint_files
from flexinfer_transfer.safetensors_loader import SafetensorsLoader
from flexinfer_transfer.sharding import slice_shard
from flexinfer_transfer.strategy import Availability, LoadContext, LoadResult, LoadStrategy


class DefaultStrategy(LoadStrategy):
    """Loads every tensor with ``safetensors.torch.load_file``; a TP rank slices after."""

    name = "default"

    def is_available(self, ctx: LoadContext) -> Availability:
        """Available whenever the directory holds a safetensors checkpoint."""
        checkpoint_files(ctx.model_dir)  # raises NotApplicableError with the reason
        return Availability.yes()

    def load(self, ctx: LoadContext) -> LoadResult:
        """The whole checkpoint, or this rank's slices of it."""
        tensors = SafetensorsLoader().load(ctx.model_dir, ctx.device)
        if ctx.shard is not None:
            tensors = {k: slice_shard(k, v, ctx.shard) for k, v in tensors.items()}
        return LoadResult(tensors, str(ctx.model_dir))
