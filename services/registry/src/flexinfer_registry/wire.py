"""FileChunk encoded by hand: one copy of the file bytes into the wire message.

Building a ``model_pb2.FileChunk`` and serialising it copies each chunk's data twice
(into the message, then into the serialised bytes); StreamModelFiles is all data, so it
encodes the message itself, producing exactly the bytes ``FileChunk.SerializeToString``
would (fields in number order, proto3 defaults omitted), with the data joined straight
from the read buffer.
"""

from __future__ import annotations

from flexinfer_registry.core.files import Chunk

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
    head = _text(_PATH, chunk.relative_path) if chunk.relative_path else b""
    size = len(chunk.data)
    if size:
        head += _DATA + varint(size)
    tail = b""
    if chunk.offset:
        tail += _OFFSET + varint(chunk.offset)
    if chunk.total_size:
        tail += _TOTAL + varint(chunk.total_size)
    if chunk.is_last_chunk:
        tail += _LAST_CHUNK
    if chunk.is_last_file:
        tail += _LAST_FILE
    if chunk.commit_hash is not None:
        tail += _text(_COMMIT, chunk.commit_hash)
    # join copies the data once, straight from the (possibly reused) read buffer.
    return b"".join((head, chunk.data, tail)) if size else head + tail


def passthrough(message: bytes) -> bytes:
    """Response serializer for messages that are already encoded."""
    return message
