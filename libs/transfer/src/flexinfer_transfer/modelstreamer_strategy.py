"""runai-model-streamer: concurrent reads of local or object-store safetensors."""

from __future__ import annotations

import importlib
from typing import Any

from flexinfer_transfer.checkpoint import checkpoint_files
from flexinfer_transfer.optional_packages import missing_package
from flexinfer_transfer.strategy import Availability, LoadContext, LoadResult, LoadStrategy


class ModelStreamerStrategy(LoadStrategy):
    """Streams each file with ``SafetensorsStreamer`` when the package is installed."""

    name = "runai_streamer"

    def is_available(self, ctx: LoadContext) -> Availability:
        """Available when the package imports and no TP slicing is asked for."""
        reason = missing_package("runai_model_streamer")
        if reason is None and ctx.shard is not None:
            reason = "tensor-parallel slices are read by the gds strategy's ranged reads"
        return Availability.no(reason) if reason else Availability.yes()

    def load(self, ctx: LoadContext) -> LoadResult:
        """Every tensor; the streamer reuses its buffers, so each is copied out."""
        module: Any = importlib.import_module("runai_model_streamer")
        tensors = {}
        with module.SafetensorsStreamer() as streamer:
            for path in checkpoint_files(ctx.model_dir):
                streamer.stream_file(str(path))
                for name, tensor in streamer.get_tensors():
                    tensors[name] = tensor.to(ctx.device, copy=True)
        return LoadResult(tensors, str(ctx.model_dir))
