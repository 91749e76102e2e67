"""Plain safetensors loading: ``model.safetensors`` or a sharded index."""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from flexinfer_common.errors import NotFoundError, PermanentError
from flexinfer_transfer.checkpoint import INDEX_FILE, check_complete, checkpoint_files
from flexinfer_transfer.loader import WeightLoader


class SafetensorsLoader(WeightLoader):
    """Reads safetensors files from a local directory with safetensors' own reader."""

    name = "safetensors"

    def load(self, model_dir: Path, device: str) -> dict[str, torch.Tensor]:
        """Load ``model.safetensors``, or every shard named by the index file."""
        tensors: dict[str, torch.Tensor] = {}
        for path in checkpoint_files(model_dir):
            for key, tensor in _load_one(path, device).items():
                if key in tensors:
                    raise PermanentError(f"{path}: tensor {key!r} appears in two shards")
                tensors[key] = tensor
        index = model_dir / INDEX_FILE
        if index.is_file():
            check_complete(index, dict(tensors))
        return tensors


def _load_one(path: Path, device: str) -> dict[str, torch.Tensor]:
    try:
        return load_file(path, device=device)
    except FileNotFoundError as exc:
        raise NotFoundError(f"{path} does not exist") from exc
    except SafetensorError as exc:
        raise PermanentError(f"{path}: not a valid safetensors file: {exc}") from exc
    except (RuntimeError, ValueError, OSError) as exc:
        # torch rejects unknown or unavailable devices with RuntimeError.
        raise PermanentError(f"{path}: cannot load onto {device!r}: {exc}") from exc
