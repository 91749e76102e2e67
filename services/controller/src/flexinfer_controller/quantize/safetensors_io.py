"""Reading and writing safetensors files with numpy alone (no torch in the controller image).

The format: an 8-byte little-endian header length, a JSON header naming each tensor's
dtype, shape and byte range, then the bytes. numpy has no bfloat16 or float8 types, so
tensors are read as raw bytes and widened to float32 here where a conversion needs them.
"""

from __future__ import annotations

import json
import mmap
import struct
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from math import prod
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO

import numpy as np

from flexinfer_controller.quantize.errors import QuantizeError

ITEM_SIZES = {
    "F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
    "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1, "U16": 2, "U32": 4, "U64": 8,
}  # fmt: skip
FLOATS = ("F64", "F32", "F16", "BF16")
"""The dtypes a conversion reads as numbers (widened to float32)."""
_MAX_HEADER = 100 * 1024 * 1024
INDEX = "model.safetensors.index.json"


@dataclass(frozen=True)
class Entry:
    """One tensor of a file: its dtype, shape and byte range in the data section."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int


def _parse_header(raw: bytes, path: Path) -> tuple[dict[str, Entry], dict[str, str]]:
    try:
        header = json.loads(raw)
    except ValueError as exc:
        raise QuantizeError(f"{path}: not a safetensors file ({exc})") from exc
    if not isinstance(header, dict):
        raise QuantizeError(f"{path}: not a safetensors file (header is not an object)")
    metadata = header.pop("__metadata__", None) or {}
    entries: dict[str, Entry] = {}
    for name, info in header.items():
        try:
            dtype, shape, (begin, end) = info["dtype"], tuple(info["shape"]), info["data_offsets"]
        except (KeyError, TypeError, ValueError) as exc:
            raise QuantizeError(f"{path}: malformed entry for tensor {name!r}") from exc
        if dtype not in ITEM_SIZES or end - begin != prod(shape) * ITEM_SIZES[dtype]:
            raise QuantizeError(f"{path}: tensor {name!r} has dtype {dtype} or a wrong size")
        entries[name] = Entry(name, dtype, shape, begin, end)
    return entries, {str(k): str(v) for k, v in metadata.items()}


class SafetensorsFile:
    """One safetensors file, memory-mapped: tensors are read when asked for."""

    def __init__(self, path: Path) -> None:
        self.path = path
        with path.open("rb") as fh:
            head = fh.read(8)
            if len(head) != 8:
                raise QuantizeError(f"{path}: too short for a safetensors file")
            (size,) = struct.unpack("<Q", head)
            if size > _MAX_HEADER:
                raise QuantizeError(f"{path}: header of {size} bytes is not plausible")
            self.entries, self.metadata = _parse_header(fh.read(size), path)
            self._start = 8 + size
            data_size = path.stat().st_size - self._start
            if any(e.end > data_size for e in self.entries.values()):
                raise QuantizeError(f"{path}: a tensor lies past the end of the file (truncated?)")
            self._map = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)

    def __enter__(self) -> SafetensorsFile:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._map.close()

    def raw(self, name: str) -> bytes:
        """A copy of the tensor's bytes as stored (no view outlives the mapping)."""
        entry = self.entries[name]
        return self._map[self._start + entry.begin : self._start + entry.end]

    def float32(self, name: str) -> np.ndarray[Any, np.dtype[np.float32]]:
        """A float tensor widened to float32, in its shape."""
        entry = self.entries[name]
        data = np.frombuffer(self.raw(name), dtype=np.uint8)
        if entry.dtype == "BF16":
            # bfloat16 is the top half of a float32: shift it back into place.
            wide = data.view("<u2").astype(np.uint32) << 16
            return wide.view(np.float32).reshape(entry.shape)
        kinds = {"F64": "<f8", "F32": "<f4", "F16": "<f2"}
        if entry.dtype not in kinds:
            raise QuantizeError(f"{self.path}: tensor {name!r} is {entry.dtype}, not a float")
        return data.view(kinds[entry.dtype]).astype(np.float32).reshape(entry.shape)


@dataclass(frozen=True)
class OutTensor:
    """A tensor to write: its header fields, and how to make its bytes when its turn comes."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    produce: Callable[[], bytes | np.ndarray[Any, Any]]

    @property
    def nbytes(self) -> int:
        """Its size in the data section."""
        return prod(self.shape) * ITEM_SIZES[self.dtype]


def _header(tensors: Sequence[OutTensor], metadata: dict[str, str]) -> bytes:
    header: dict[str, Any] = {"__metadata__": metadata} if metadata else {}
    offset = 0
    for tensor in tensors:
        header[tensor.name] = {
            "dtype": tensor.dtype,
            "shape": list(tensor.shape),
            "data_offsets": [offset, offset + tensor.nbytes],
        }
        offset += tensor.nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    return raw + b" " * (-len(raw) % 8)  # the data section starts 8-byte aligned


def write_file(path: Path, tensors: Sequence[OutTensor], metadata: dict[str, str]) -> None:
    """Write ``tensors`` in order, making each one's bytes only when it is written."""
    header = _header(tensors, metadata)
    with path.open("wb") as fh:
        fh.write(struct.pack("<Q", len(header)))
        fh.write(header)
        for tensor in tensors:
            _write_bytes(fh, tensor)


def _write_bytes(fh: BinaryIO, tensor: OutTensor) -> None:
    data = tensor.produce()
    raw = data.tobytes() if isinstance(data, np.ndarray) else data
    if len(raw) != tensor.nbytes:
        raise QuantizeError(f"tensor {tensor.name!r}: made {len(raw)} bytes, {tensor.nbytes} due")
    fh.write(raw)


def checkpoint_files(directory: Path) -> list[Path]:
    """The checkpoint's safetensors files: those its index names, else every one there."""
    index = directory / INDEX
    if index.is_file():
        weight_map = read_json(index).get("weight_map")
        if not isinstance(weight_map, dict):
            raise QuantizeError(f"{index}: no weight_map object")
        names = sorted({str(v) for v in weight_map.values()})
        files = [directory / n for n in names]
    else:
        files = sorted(directory.glob("*.safetensors"))
    if not files:
        raise QuantizeError(f"{directory}: no *.safetensors weights (only safetensors is read)")
    for file in files:
        if file.parent != directory or not file.is_file():
            raise QuantizeError(f"{directory}: weight file {file.name} is missing")
    return files


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object from ``path``; QuantizeError when it is not one."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise QuantizeError(f"{path}: unreadable JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise QuantizeError(f"{path}: not a JSON object")
    return data


@contextmanager
def open_all(files: Sequence[Path]) -> Iterator[list[SafetensorsFile]]:
    """Every file of a checkpoint, open (and closed again on the way out)."""
    opened: list[SafetensorsFile] = []
    try:
        for file in files:
            opened.append(SafetensorsFile(file))
        yield opened
    finally:
        for handle in opened:
            handle.__exit__(None, None, None)
