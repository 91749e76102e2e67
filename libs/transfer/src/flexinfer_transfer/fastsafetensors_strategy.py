"""fastsafetensors: parallel file reads into device memory (GDS with ``nogds=False``)."""

from __future__ import annotations

import importlib
import os
from typing import Any

import torch

from flexinfer_transfer.checkpoint import checkpoint_files
from flexinfer_transfer.optional_packages import missing_package
from flexinfer_transfer.posix_reader import open_file
from flexinfer_transfer.safetensors_format import read_header
from flexinfer_transfer.strategy import Availability, LoadContext, LoadResult, LoadStrategy


class FastSafetensorsStrategy(LoadStrategy):
    """Loads through fastsafetensors when it is installed; no GDS on CPU."""

    name = "fastsafetensors"

    def is_available(self, ctx: LoadContext) -> Availability:
        """Available when the package imports and the checkpoint is unsharded per rank."""
        reason = missing_package("fastsafetensors")
        if reason is None and ctx.shard is not None:
            reason = "tensor-parallel slices are read by the gds strategy's ranged reads"
        return Availability.no(reason) if reason else Availability.yes()

    def load(self, ctx: LoadContext) -> LoadResult:
        """Every tensor, copied out of fastsafetensors' buffers before they are freed."""
        module: Any = importlib.import_module("fastsafetensors")
        paths = checkpoint_files(ctx.model_dir)
        device = torch.device(ctx.device)
        loader = module.SafeTensorsFileLoader(module.SingleGroup(), device, nogds=True)
        try:
            loader.add_filenames({0: [str(p) for p in paths]})
            buffers = loader.copy_files_to_device()
            try:
                tensors = {n: buffers.get_tensor(n).clone() for n in _names(paths)}
            finally:
                buffers.close()
        finally:
            loader.close()
        return LoadResult(tensors, str(ctx.model_dir))


def _names(paths: list[Any]) -> list[str]:
    names: list[str] = []
    for path in paths:
        fd = open_file(path)
        try:
            names += [entry.name for entry in read_header(path, fd).entries]
        finally:
            os.close(fd)
    return names
