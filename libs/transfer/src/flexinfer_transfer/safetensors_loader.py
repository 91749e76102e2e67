"""Plain safetensors loading: ``model.safetensors`` or a sharded index."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from flexinfer_common.errors import NotFoundError, PermanentError
from flexinfer_transfer.loader import NotApplicableError, WeightLoader

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"


class SafetensorsLoader(WeightLoader):
    """Reads safetensors files from a local directory with safetensors' own reader."""

    name = "safetensors"

    def load(self, model_dir: Path, device: str) -> dict[str, torch.Tensor]:
        """Load ``model.safetensors``, or every shard named by the index file."""
        if not model_dir.is_dir():
            raise NotFoundError(f"model directory {model_dir} does not exist")
        index = model_dir / INDEX_FILE
        if index.is_file():
            return self._load_sharded(index, device)
        single = model_dir / SINGLE_FILE
        if single.is_file():
            return _load_one(single, device)
        raise NotApplicableError(f"no {SINGLE_FILE} or {INDEX_FILE} in {model_dir}")

    def _load_sharded(self, index: Path, device: str) -> dict[str, torch.Tensor]:
        weight_map = _read_weight_map(index)
        tensors: dict[str, torch.Tensor] = {}
        for shard in sorted(set(weight_map.values())):
            path = index.parent / shard
            # A shard outside the model directory would let an index read arbitrary files.
            if path.resolve().parent != index.parent.resolve():
                raise PermanentError(f"{index}: shard {shard!r} is outside the model directory")
            if not path.is_file():
                raise NotFoundError(f"shard {path} named by {index} does not exist")
            for key, tensor in _load_one(path, device).items():
                if key in tensors:
                    raise PermanentError(f"{path}: tensor {key!r} appears in two shards")
                tensors[key] = tensor
        missing = sorted(set(weight_map) - set(tensors))
        if missing:
            raise PermanentError(f"{index}: tensors missing from their shards: {missing[:5]}")
        return tensors


def _read_weight_map(index: Path) -> dict[str, str]:
    try:
        document = json.loads(index.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PermanentError(f"{index}: unreadable index: {exc}") from exc
    weight_map = document.get("weight_map") if isinstance(document, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise PermanentError(f"{index}: no 'weight_map' object")
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in weight_map.items()):
        raise PermanentError(f"{index}: 'weight_map' must map tensor names to file names")
    return weight_map


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
