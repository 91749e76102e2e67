"""FP8: linear weights to float8_e4m3fn with float32 scales, as compressed-tensors.

The layout vLLM reads for FP8 checkpoints (llm-compressor's ``FP8_DYNAMIC`` scheme):
each quantized ``<module>.weight`` is F8_E4M3 beside a ``<module>.weight_scale`` (one per
output channel, shape (rows, 1), or one per tensor, shape (1,)); activations are quantized
per token at run time; config.json gets the ``quantization_config`` naming it all. The
modules left in higher precision (the lm_head, embeddings, ``ignore``) are listed there.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from flexinfer_controller.quantize import fp8
from flexinfer_controller.quantize.checkpoint import CONFIG, copy_others, read_config
from flexinfer_controller.quantize.errors import QuantizeError, UnsupportedError
from flexinfer_controller.quantize.request import QuantizeRequest
from flexinfer_controller.quantize.safetensors_io import (
    FLOATS,
    INDEX,
    OutTensor,
    SafetensorsFile,
    checkpoint_files,
    read_json,
    write_file,
)

OPTIONS = frozenset({"strategy", "ignore"})
STRATEGIES = ("channel", "tensor")
_EMBEDDINGS = ("embed", "wte", "wpe", "word_embeddings", "position_embeddings")
DEFAULT_IGNORE = ("lm_head",)


def _settings(request: QuantizeRequest) -> tuple[bool, frozenset[str]]:
    unknown = sorted(set(request.options) - OPTIONS)
    if unknown:
        raise UnsupportedError(f"FP8 has no option {', '.join(unknown)} (known: strategy, ignore)")
    strategy = request.options.get("strategy", "channel").lower()
    if strategy not in STRATEGIES:
        raise UnsupportedError(f"FP8 strategy {strategy!r} is not one of {', '.join(STRATEGIES)}")
    extra = request.options.get("ignore", "")
    ignore = frozenset(DEFAULT_IGNORE) | {m.strip() for m in extra.split(",") if m.strip()}
    return strategy == "channel", ignore


def is_linear(name: str, dtype: str, shape: tuple[int, ...], ignore: frozenset[str]) -> bool:
    """Whether ``name`` is a linear layer's weight to quantize (2-D float, not an embedding)."""
    if not name.endswith(".weight") or dtype not in FLOATS or len(shape) != 2:
        return False
    module = name[: -len(".weight")]
    leaf = module.rsplit(".", 1)[-1]
    return module not in ignore and not any(e in leaf for e in _EMBEDDINGS)


class _Weight:
    """One weight to quantize: its codes are made when written, its scale right after."""

    def __init__(self, handle: SafetensorsFile, name: str, per_channel: bool) -> None:
        self._handle, self._name, self._per_channel = handle, name, per_channel
        self._scale: np.ndarray[Any, np.dtype[np.float32]] | None = None

    def codes(self) -> np.ndarray[Any, Any]:
        """The F8_E4M3 codes (uint8); keeps the scale for ``scale``."""
        try:
            codes, self._scale = fp8.quantize_weight(
                self._handle.float32(self._name), self._per_channel
            )
        except ValueError as exc:
            raise QuantizeError(f"{self._handle.path.name}: {self._name}: {exc}") from exc
        return codes

    def scale(self) -> np.ndarray[Any, Any]:
        """The scales computed with the codes (which are written first)."""
        assert self._scale is not None, "the codes are written before their scale"
        scale, self._scale = self._scale, None
        return scale


def _stored(handle: SafetensorsFile, name: str) -> Callable[[], bytes]:
    return lambda: handle.raw(name)


def _file_tensors(
    handle: SafetensorsFile, per_channel: bool, ignore: frozenset[str], kept: list[str]
) -> list[OutTensor]:
    out: list[OutTensor] = []
    for entry in handle.entries.values():
        name = entry.name
        if not is_linear(name, entry.dtype, entry.shape, ignore):
            if name.endswith(".weight") and len(entry.shape) == 2:
                kept.append(name[: -len(".weight")])
            out.append(OutTensor(name, entry.dtype, entry.shape, _stored(handle, name)))
            continue
        weight = _Weight(handle, name, per_channel)
        scale_shape = (entry.shape[0], 1) if per_channel else (1,)
        out.append(OutTensor(name, "F8_E4M3", entry.shape, weight.codes))
        out.append(OutTensor(f"{name}_scale", "F32", scale_shape, weight.scale))
    return out


def quantization_config(per_channel: bool, ignore: list[str]) -> dict[str, Any]:
    """config.json's ``quantization_config`` for these weights (compressed-tensors)."""
    weights = {"num_bits": 8, "type": "float", "symmetric": True, "dynamic": False,
               "strategy": "channel" if per_channel else "tensor"}  # fmt: skip
    activations = {"num_bits": 8, "type": "float", "symmetric": True, "dynamic": True,
                   "strategy": "token"}  # fmt: skip
    group = {"targets": ["Linear"], "weights": weights, "input_activations": activations,
             "output_activations": None}  # fmt: skip
    return {
        "quant_method": "compressed-tensors",
        "format": "float-quantized",
        "quantization_status": "compressed",
        "config_groups": {"group_0": group},
        "ignore": ignore,
        "kv_cache_scheme": None,
    }


def convert(request: QuantizeRequest, staging: Path) -> None:
    """Write the FP8 checkpoint of ``request.input`` into ``staging``."""
    per_channel, ignore = _settings(request)
    config = read_config(request.input)
    kept: list[str] = []
    weight_map: dict[str, str] = {}
    total = 0
    for path in checkpoint_files(request.input):
        with SafetensorsFile(path) as handle:
            tensors = _file_tensors(handle, per_channel, ignore, kept)
            write_file(staging / path.name, tensors, handle.metadata)
        weight_map.update({t.name: path.name for t in tensors})
        total += sum(t.nbytes for t in tensors)
    if not any(name.endswith(".weight_scale") for name in weight_map):
        raise UnsupportedError(f"{request.input}: no linear layer weights to quantize")
    config["quantization_config"] = quantization_config(per_channel, sorted(set(kept)))
    _write_json(staging / CONFIG, config)
    if (request.input / INDEX).is_file():
        index = read_json(request.input / INDEX)
        index["weight_map"] = dict(sorted(weight_map.items()))
        index["metadata"] = {**(index.get("metadata") or {}), "total_size": total}
        _write_json(staging / INDEX, index)
    copy_others(request.input, staging)


def _write_json(path: Path, data: object) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
