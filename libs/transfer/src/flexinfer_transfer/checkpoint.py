"""Which safetensors files make up a model directory (one file or a sharded index)."""

from __future__ import annotations

import json
from pathlib import Path

from flexinfer_common.errors import NotFoundError, PermanentError
from flexinfer_transfer.loader import NotApplicableError

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"


def checkpoint_files(model_dir: Path) -> list[Path]:
    """The safetensors files of ``model_dir``, checked to exist and stay inside it."""
    if not model_dir.is_dir():
        raise NotFoundError(f"model directory {model_dir} does not exist")
    index = model_dir / INDEX_FILE
    if index.is_file():
        return shard_files(index)
    single = model_dir / SINGLE_FILE
    if single.is_file():
        return [single]
    raise NotApplicableError(f"no {SINGLE_FILE} or {INDEX_FILE} in {model_dir}")


def shard_files(index: Path) -> list[Path]:
    """The shards an index names, sorted, each inside the index's directory."""
    paths = []
    for shard in sorted(set(read_weight_map(index).values())):
        path = index.parent / shard
        # A shard outside the model directory would let an index read arbitrary files.
        if path.resolve().parent != index.parent.resolve():
            raise PermanentError(f"{index}: shard {shard!r} is outside the model directory")
        if not path.is_file():
            raise NotFoundError(f"shard {path} named by {index} does not exist")
        paths.append(path)
    return paths


def read_weight_map(index: Path) -> dict[str, str]:
    """The index's tensor name -> shard file map, validated."""
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


def check_complete(index: Path, tensors: dict[str, object]) -> None:
    """Every tensor the index names was found in its shards."""
    missing = sorted(set(read_weight_map(index)) - set(tensors))
    if missing:
        raise PermanentError(f"{index}: tensors missing from their shards: {missing[:5]}")
