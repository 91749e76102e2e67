"""The safetensors header: tensor names, dtypes, shapes and absolute byte ranges."""

from __future__ import annotations

import json
import math
import os
import struct
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TypeGuard

import torch

from flexinfer_common.errors import PermanentError

MAX_HEADER_BYTES = 100 << 20
"""safetensors' own limit: a larger header is a corrupt or hostile file."""

DTYPES: dict[str, torch.dtype] = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "U16": torch.uint16,
    "U32": torch.uint32,
    "U64": torch.uint64,
    "BOOL": torch.bool,
    "F8_E4M3": torch.float8_e4m3fn,
    "F8_E5M2": torch.float8_e5m2,
}


@dataclass(frozen=True)
class TensorEntry:
    """One tensor of a file: ``start``/``end`` are absolute file offsets."""

    name: str
    dtype: torch.dtype
    shape: tuple[int, ...]
    start: int
    end: int

    @property
    def nbytes(self) -> int:
        """Bytes of the tensor in the file."""
        return self.end - self.start


@dataclass(frozen=True)
class Header:
    """A parsed header: the entries in file order and where the data section begins."""

    path: Path
    entries: list[TensorEntry]
    data_start: int
    file_size: int


def read_header(path: Path, fd: int) -> Header:
    """Parse and validate the header of the safetensors file open as ``fd``."""
    if sys.byteorder != "little":  # safetensors stores little-endian bytes
        raise PermanentError("safetensors views need a little-endian host")
    size = os.fstat(fd).st_size
    prefix = os.pread(fd, 8, 0)
    if len(prefix) < 8:
        raise PermanentError(f"{path}: not a valid safetensors file: too short")
    (length,) = struct.unpack("<Q", prefix)
    if length > MAX_HEADER_BYTES or 8 + length > size:
        raise PermanentError(f"{path}: not a valid safetensors file: header length {length}")
    try:
        document = json.loads(os.pread(fd, length, 8))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PermanentError(f"{path}: not a valid safetensors file: {exc}") from exc
    if not isinstance(document, dict):
        raise PermanentError(f"{path}: not a valid safetensors file: header is not an object")
    data_start = 8 + length
    entries = [
        _entry(path, name, spec, data_start, size)
        for name, spec in document.items()
        if name != "__metadata__"
    ]
    entries.sort(key=lambda e: e.start)
    return Header(path, entries, data_start, size)


def _entry(path: Path, name: str, spec: object, data_start: int, size: int) -> TensorEntry:
    if not isinstance(spec, dict):
        raise PermanentError(f"{path}: tensor {name!r}: entry is not an object")
    dtype = DTYPES.get(str(spec.get("dtype")))
    shape, offsets = spec.get("shape"), spec.get("data_offsets")
    if dtype is None:
        raise PermanentError(f"{path}: tensor {name!r}: unsupported dtype {spec.get('dtype')!r}")
    if not _ints(shape) or not _ints(offsets) or len(offsets) != 2:
        raise PermanentError(f"{path}: tensor {name!r}: bad shape or data_offsets")
    start, end = data_start + offsets[0], data_start + offsets[1]
    itemsize = torch.empty((), dtype=dtype).element_size()
    if not data_start <= start <= end <= size or end - start != math.prod(shape) * itemsize:
        raise PermanentError(f"{path}: tensor {name!r}: data_offsets outside the file or wrong")
    return TensorEntry(name, dtype, tuple(shape), start, end)


def _ints(value: object) -> TypeGuard[list[int]]:
    return isinstance(value, list) and all(type(v) is int and v >= 0 for v in value)
