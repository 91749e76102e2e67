"""GGUF: the checkpoint as one ``model.gguf`` llama.cpp loads, in F32, F16 or Q8_0.

Matrices take the asked type (Q8_0 falls back to F16 for a row length that is not a
multiple of its 32-value block); vectors (norms, biases) stay F32 as llama.cpp wants them.
Tensors are written one at a time: only one is in memory besides the mapped input.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from math import prod
from pathlib import Path
from typing import Any

import gguf
import numpy as np

from flexinfer_controller.quantize.checkpoint import CONFIG, architecture, copy_others, read_config
from flexinfer_controller.quantize.errors import UnsupportedError
from flexinfer_controller.quantize.gguf_arch import Mapping, mapping_for
from flexinfer_controller.quantize.request import GGUF_FILE, QuantizeRequest
from flexinfer_controller.quantize.safetensors_io import (
    FLOATS,
    SafetensorsFile,
    checkpoint_files,
    open_all,
)

TYPES = {
    "F32": (gguf.GGMLQuantizationType.F32, gguf.LlamaFileType.ALL_F32),
    "F16": (gguf.GGMLQuantizationType.F16, gguf.LlamaFileType.MOSTLY_F16),
    "Q8_0": (gguf.GGMLQuantizationType.Q8_0, gguf.LlamaFileType.MOSTLY_Q8_0),
}
DEFAULT_TYPE = "Q8_0"
OPTIONS = frozenset({"type"})


@dataclass(frozen=True)
class _Tensor:
    source: SafetensorsFile
    name: str
    gguf_name: str
    qtype: gguf.GGMLQuantizationType


def _type(request: QuantizeRequest) -> str:
    unknown = sorted(set(request.options) - OPTIONS)
    if unknown:
        raise UnsupportedError(f"GGUF has no option {', '.join(unknown)} (known: type)")
    name = request.options.get("type", DEFAULT_TYPE).upper()
    if name not in TYPES:
        raise UnsupportedError(f"GGUF type {name!r} is not one of {', '.join(TYPES)}")
    return name


def tensor_type(
    shape: tuple[int, ...], wanted: gguf.GGMLQuantizationType
) -> gguf.GGMLQuantizationType:
    """The type a tensor of ``shape`` is stored in when ``wanted`` is asked for."""
    if len(shape) < 2:
        return gguf.GGMLQuantizationType.F32
    block, _ = gguf.GGML_QUANT_SIZES[wanted]
    if shape[-1] % block:
        return gguf.GGMLQuantizationType.F16
    return wanted


def _plan(
    files: list[SafetensorsFile], mapping: Mapping, wanted: gguf.GGMLQuantizationType
) -> Iterator[_Tensor | tuple[SafetensorsFile, str]]:
    """Each input tensor with where it goes; a bare (file, name) is read but not stored."""
    for handle in files:
        for entry in handle.entries.values():
            if entry.dtype not in FLOATS:
                raise UnsupportedError(f"tensor {entry.name!r} is {entry.dtype}, not a float")
            target = mapping.rename(entry.name)
            if target is None:
                yield handle, entry.name
            else:
                yield _Tensor(handle, entry.name, target, tensor_type(entry.shape, wanted))


def _encoded(tensor: _Tensor, mapping: Mapping, config: dict[str, Any]) -> np.ndarray[Any, Any]:
    data = mapping.transform(tensor.name, tensor.source.float32(tensor.name), config)
    if tensor.qtype == gguf.GGMLQuantizationType.F32:
        return np.ascontiguousarray(data, dtype=np.float32)
    if tensor.qtype == gguf.GGMLQuantizationType.F16:
        return np.ascontiguousarray(data, dtype=np.float16)
    return gguf.quants.quantize(np.ascontiguousarray(data), tensor.qtype)


def _info(writer: gguf.GGUFWriter, tensor: _Tensor) -> None:
    shape = tensor.source.entries[tensor.name].shape
    if tensor.qtype == gguf.GGMLQuantizationType.F32:
        writer.add_tensor_info(tensor.gguf_name, shape, np.dtype(np.float32), prod(shape) * 4)
    elif tensor.qtype == gguf.GGMLQuantizationType.F16:
        writer.add_tensor_info(tensor.gguf_name, shape, np.dtype(np.float16), prod(shape) * 2)
    else:
        raw = gguf.quant_shape_to_byte_shape(shape, tensor.qtype)
        writer.add_tensor_info(tensor.gguf_name, raw, np.dtype(np.uint8), prod(raw), tensor.qtype)


def convert(request: QuantizeRequest, staging: Path) -> None:
    """Write ``model.gguf`` (and the tokenizer and config files) into ``staging``."""
    type_name = _type(request)
    qtype, file_type = TYPES[type_name]
    config = read_config(request.input)
    mapping = mapping_for(architecture(config), config)
    with open_all(checkpoint_files(request.input)) as files:
        planned = list(_plan(files, mapping, qtype))
        for skipped in planned:
            if isinstance(skipped, tuple):  # still checked: a dropped tensor may be refused
                handle, name = skipped
                mapping.transform(name, handle.float32(name), config)
        stored = [t for t in planned if isinstance(t, _Tensor)]
        writer = gguf.GGUFWriter(staging / GGUF_FILE, mapping.arch)
        writer.add_name(str(config.get("_name_or_path") or request.input.name))
        writer.add_file_type(int(file_type))
        writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
        mapping.metadata(writer, config)
        mapping.vocab(writer, request.input, config)
        for tensor in stored:
            _info(writer, tensor)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        for tensor in stored:
            writer.write_tensor_data(_encoded(tensor, mapping, config))
        writer.close()
    shutil.copy2(request.input / CONFIG, staging / CONFIG)
    copy_others(request.input, staging)
