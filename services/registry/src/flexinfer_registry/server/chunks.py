"""FileChunk encoded by hand: the data is copied once.

Building a ``model_pb2.FileChunk`` and serialising it copies each chunk's data twice
(into the message, then into the serialised bytes); StreamModelFiles is all data, so it
encodes the message itself, producing exactly the bytes ``FileChunk.SerializeToString``
would (fields in number order, proto3 defaults omitted). :func:`new_file_chunk` goes one
step further: it allocates the message with its data left to fill, so the file is read
straight into the bytes that grpcio sends.
"""

from __future__ import annotations

import ctypes
import functools
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
