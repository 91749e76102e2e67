"""GdsStrategy: direct file reads. NIXL's GDS backend where a GPU and nvidia-fs exist;
on CPU the POSIX path: parallel ``preadv`` into one buffer per file plus zero-copy views
(posix_reader), or, for a tensor-parallel rank, only its shard's byte ranges."""

from __future__ import annotations

from flexinfer_transfer.checkpoint import INDEX_FILE, check_complete, checkpoint_files
from flexinfer_transfer.posix_reader import ReaderSettings, read_safetensors
from flexinfer_transfer.ranged_reader import read_shard
from flexinfer_transfer.strategy import Availability, LoadContext, LoadResult, LoadStrategy


class GdsStrategy(LoadStrategy):
    """File reads into private memory, then onto the device."""

    name = "gds"

    def __init__(self, settings: ReaderSettings | None = None) -> None:
        self.settings = settings or ReaderSettings()

    def is_available(self, ctx: LoadContext) -> Availability:
        """Available when the directory holds a safetensors checkpoint."""
        checkpoint_files(ctx.model_dir)  # raises NotApplicableError with the reason
        return Availability.yes()

    def load(self, ctx: LoadContext) -> LoadResult:
        """Every tensor (or this rank's slices), on ``ctx.device``."""
        paths = checkpoint_files(ctx.model_dir)
        if ctx.shard is not None:
            tensors = read_shard(paths, ctx.shard).tensors
        else:
            tensors = read_safetensors(paths, self.settings)
        index = ctx.model_dir / INDEX_FILE
        if index.is_file():
            check_complete(index, dict(tensors))
        if ctx.device != "cpu":
            tensors = {k: v.to(ctx.device) for k, v in tensors.items()}
        return LoadResult(tensors, str(ctx.model_dir))
