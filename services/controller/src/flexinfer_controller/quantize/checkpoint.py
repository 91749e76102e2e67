"""What conversions share about an HF checkpoint directory: its config and its other files."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from flexinfer_controller.quantize.errors import QuantizeError, UnsupportedError
from flexinfer_controller.quantize.safetensors_io import INDEX, read_json

CONFIG = "config.json"


def read_config(directory: Path) -> dict[str, Any]:
    """config.json of an unquantized checkpoint; refused when it is already quantized."""
    path = directory / CONFIG
    if not path.is_file():
        raise QuantizeError(f"{directory}: no config.json (the input must be an HF checkpoint)")
    config = read_json(path)
    if config.get("quantization_config"):
        method = config["quantization_config"].get("quant_method", "?")
        raise UnsupportedError(f"{directory}: the checkpoint is already quantized ({method})")
    return config


def architecture(config: dict[str, Any]) -> str:
    """The checkpoint's first ``architectures`` entry ("" when it names none)."""
    names = config.get("architectures") or []
    return str(names[0]) if isinstance(names, list) and names else ""


def copy_others(source: Path, dest: Path, *, skip_weights: bool = True) -> None:
    """Copy every file but the weights, their index and config.json (rewritten by the
    caller); hidden files (a quantizer's markers, a download's partial files) stay behind."""
    for item in sorted(source.iterdir()):
        if item.name.startswith(".") or item.name in (CONFIG, INDEX):
            continue
        if skip_weights and item.suffix == ".safetensors":
            continue
        if item.is_symlink() and not item.resolve().is_relative_to(source.resolve()):
            raise QuantizeError(f"{item}: a symlink out of the input directory is not copied")
        target = dest / item.name
        if item.is_dir():
            shutil.copytree(item, target, symlinks=False)
        elif item.is_file():
            shutil.copy2(item, target)
