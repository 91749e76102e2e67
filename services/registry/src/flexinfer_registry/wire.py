"""FileChunk encoded and decoded by hand: the data is copied once or not at all.

Building a ``model_pb2.FileChunk`` and serialising it copies each chunk's data twice
(into the message, then into the serialised bytes); StreamModelFiles is all data, so it
encodes the message itself, producing exactly the bytes ``FileChunk.SerializeToString``
would (fields in number order, proto3 defaults omitted). :func:`new_file_chunk` goes one
step further: it allocates the message with its data left to fill, so the file is read
straight into the bytes that grpcio sends.

Parsing one with protobuf copies the data twice too (into the message, then out of it
on ``.data``), so the client decodes it here instead, with ``data`` a view of the received
message. The decoder accepts what protobuf's own parser accepts for FileChunk (any field
order, repeats where the last wins, unknown fields and groups skipped, a known field with
an unexpected wire type treated as unknown) and rejects what it rejects.
"""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass
from typing import Any

from flexinfer_registry.core.files import Chunk, ChunkHeader

# Tags: (field number << 3) | wire type (0 varint, 2 length-delimited).
_PATH, _DATA, _OFFSET, _TOTAL, _LAST_CHUNK, _LAST_FILE, _COMMIT = (
    b"\x0a",
    b"\x12",
    b"\x18",
    b"\x20",
    b"\x28\x01",
    b"\x30\x01",
    b"\x3a",
)


def varint(value: int) -> bytes:
    """Protobuf base-128 varint of a non-negative integer."""
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _text(tag: bytes, value: str) -> bytes:
    raw = value.encode()
    return tag + varint(len(raw)) + raw


def encode_file_chunk(chunk: Chunk) -> bytes:
    """The wire bytes of ``chunk`` as a model_express.model.FileChunk."""
    message, data = new_file_chunk(chunk.header())
    with data:
        data[:] = chunk.data
    return message


def new_file_chunk(header: ChunkHeader) -> tuple[bytes, memoryview]:
    """A FileChunk message for ``header`` with its data field left to fill, and a writable
    view of that field.

    Fill the view, then release it, before the message is used or shared: the bytes object
    is new and unshared until then, which is when the C API lets its contents be written
    (``PyBytes_FromStringAndSize(NULL, n)``). The view must not outlive the message.
    """
    head = _text(_PATH, header.relative_path) if header.relative_path else b""
    size = header.size
    if size:
        head += _DATA + varint(size)
    tail = b""
    if header.offset:
        tail += _OFFSET + varint(header.offset)
    if header.total_size:
        tail += _TOTAL + varint(header.total_size)
    if header.is_last_chunk:
        tail += _LAST_CHUNK
    if header.is_last_file:
        tail += _LAST_FILE
    if header.commit_hash is not None:
        tail += _text(_COMMIT, header.commit_hash)
    if not size:
        return head + tail, memoryview(bytearray())
    new_bytes, address_of = _bytes_api()
    # size > 0 makes the message at least 3 bytes: never one of CPython's shared 0/1-byte objects.
    message = new_bytes(None, len(head) + size + len(tail))
    start = address_of(message)
    ctypes.memmove(start, head, len(head))
    ctypes.memmove(start + len(head) + size, tail, len(tail))
    data = (ctypes.c_char * size).from_address(start + len(head))
    return message, memoryview(data).cast("B")


@functools.cache
def _bytes_api() -> tuple[Any, Any]:
    """CPython's PyBytes_FromStringAndSize and PyBytes_AsString, as private prototypes
    (setting argtypes on ``ctypes.pythonapi``'s shared function objects would change them
    for every other user in the process)."""
    api = ctypes.pythonapi
    new_bytes = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_char_p, ctypes.c_ssize_t)(
        ("PyBytes_FromStringAndSize", api)
    )
    address_of = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object)(("PyBytes_AsString", api))
    return new_bytes, address_of


def passthrough(message: bytes) -> bytes:
    """Response serializer for messages that are already encoded."""
    return message


_MASK64 = (1 << 64) - 1
_MAX_TAG = (1 << 32) - 1
_MAX_GROUP_DEPTH = 100
"""Nested unknown groups allowed: protobuf's default recursion limit, which upb enforces."""


class WireFormatError(ValueError):
    """Bytes that are not a valid protobuf encoding of a FileChunk."""


@dataclass(frozen=True, slots=True)
class FileChunkView:
    """A decoded FileChunk; ``commit_hash`` is None when the field is absent.

    ``data`` is a view of the received message, which it keeps alive: copy it
    (``bytes(view.data)``) only to keep the data apart from the message.
    """

    relative_path: str
    data: memoryview
    offset: int
    total_size: int
    is_last_chunk: bool
    is_last_file: bool
    commit_hash: str | None


def decode_file_chunk(message: bytes | memoryview) -> FileChunkView:
    """Decode a FileChunk's wire bytes, its data a view of ``message``; WireFormatError if bad."""
    path, commit, offset, total, last_chunk, last_file = "", None, 0, 0, False, False
    data_start = data_end = pos = 0
    end = len(message)
    while pos < end:
        field, wire_type, pos = _tag(message, pos, end)
        if wire_type == 0:
            value, pos = _varint(message, pos, end)
            if field == 3:
                offset = value
            elif field == 4:
                total = value
            elif field == 5:
                last_chunk = value != 0
            elif field == 6:
                last_file = value != 0
        elif wire_type == 2:
            start, pos = _length_delimited(message, pos, end, field)
            if field == 1:
                path = _utf8(message, start, pos, "relative_path")
            elif field == 2:
                data_start, data_end = start, pos
            elif field == 7:
                commit = _utf8(message, start, pos, "commit_hash")
        else:
            pos = _skip(message, pos, end, field, wire_type)
    data = memoryview(message)[data_start:data_end]
    return FileChunkView(path, data, offset, total, last_chunk, last_file, commit)


def _varint(message: bytes | memoryview, pos: int, end: int) -> tuple[int, int]:
    """(value, next position); bits past 64 are dropped, as protobuf does for uint64."""
    value = shift = 0
    while pos < end:
        byte = message[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value & _MASK64, pos
        shift += 7
        if shift == 70:
            raise WireFormatError(f"varint longer than 10 bytes at byte {pos - 10}")
    raise WireFormatError("varint truncated by the end of the message")


def _tag(message: bytes | memoryview, pos: int, end: int) -> tuple[int, int, int]:
    """(field number, wire type, next position) of the tag at ``pos``."""
    start, tag = pos, message[pos]
    if tag < 0x80:  # fields 1-15: every tag FileChunk's own fields use
        pos += 1
    else:
        tag, pos = _varint(message, pos, end)
        if pos - start > 5 or tag > _MAX_TAG:
            raise WireFormatError(f"tag at byte {start} does not fit 32 bits")
    if tag < 8:
        raise WireFormatError(f"field number 0 at byte {start}")
    return tag >> 3, tag & 7, pos


def _length_delimited(
    message: bytes | memoryview, pos: int, end: int, field: int
) -> tuple[int, int]:
    """(start, end) of the length-delimited value at ``pos``."""
    length, start = _varint(message, pos, end)
    if length > end - start:
        raise WireFormatError(
            f"field {field} claims {length} bytes at byte {start}, past the message's {end}"
        )
    return start, start + length


def _utf8(message: bytes | memoryview, start: int, stop: int, name: str) -> str:
    try:
        return str(message[start:stop], "utf-8")
    except UnicodeDecodeError as exc:
        raise WireFormatError(f"{name} is not valid UTF-8: {exc.reason}") from exc


def _skip(message: bytes | memoryview, pos: int, end: int, field: int, wire_type: int) -> int:
    """The position after an unknown field's value (after its end-group for a group)."""
    groups: list[int] = []  # field numbers of the groups open around pos
    while True:
        if wire_type == 0:
            pos = _varint(message, pos, end)[1]
        elif wire_type == 2:
            pos = _length_delimited(message, pos, end, field)[1]
        elif wire_type in (1, 5):
            pos += 8 if wire_type == 1 else 4
            if pos > end:
                raise WireFormatError(f"field {field}: fixed-size value truncated")
        elif wire_type == 3:
            groups.append(field)
            if len(groups) > _MAX_GROUP_DEPTH:
                raise WireFormatError(f"groups nested deeper than {_MAX_GROUP_DEPTH}")
        elif wire_type == 4:
            if not groups or groups.pop() != field:
                raise WireFormatError(f"end-group for field {field} without its start-group")
        else:
            raise WireFormatError(f"field {field}: wire type {wire_type} does not exist")
        if not groups:
            return pos
        if pos >= end:
            raise WireFormatError(f"group for field {groups[0]} has no end-group")
        field, wire_type, pos = _tag(message, pos, end)
