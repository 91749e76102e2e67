"""FileChunk encoded by hand: the file is read straight into the message grpcio sends.

Building a ``model_pb2.FileChunk`` and serialising it copies each chunk's data twice
(into the message, then into the serialised bytes); StreamModelFiles is all data, so it
encodes the message itself, producing exactly the bytes ``FileChunk.SerializeToString``
would (fields in number order, proto3 defaults omitted).

:class:`FileChunkBuilder` lays the message out in an ``io.BytesIO`` and hands out a
writable view of its data field, which the file is read into; ``build()`` then takes the
buffer's value. CPython's BytesIO hands its buffer over without copying when nothing
still views it, and copies it when something does, so the data is copied once (file ->
message) and no reader can ever write into bytes already handed out. A read left running
in a worker thread by a cancelled call holds its own view, which keeps the buffer alive
(the buffer protocol's export count), so nothing is ever written into freed memory.
"""

from __future__ import annotations

import io

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


def encoded_fields(header: ChunkHeader) -> tuple[bytes, bytes]:
    """The encoded fields before the data (path, data tag and length) and after it."""
    head = _text(_PATH, header.relative_path) if header.relative_path else b""
    if header.size:
        head += _DATA + varint(header.size)
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
    return head, tail


class FileChunkBuilder:
    """One FileChunk message for ``header``: fill :attr:`data`, then :meth:`build` it.

    ``data`` is a writable view of the message's data field (``header.size`` bytes, zeroed
    until filled). A builder builds one message; one whose fill failed is dropped.
    """

    def __init__(self, header: ChunkHeader) -> None:
        head, tail = encoded_fields(header)
        self._buffer = io.BytesIO()
        self._buffer.write(head)
        self._buffer.seek(len(head) + header.size)
        self._buffer.write(tail)
        self._whole = self._buffer.getbuffer()
        self.data = self._whole[len(head) : len(head) + header.size]

    def build(self) -> bytes:
        """The message's bytes; ``data`` may not be used after this."""
        self.data.release()
        self._whole.release()
        return self._buffer.getvalue()


def encode_file_chunk(chunk: Chunk) -> bytes:
    """The wire bytes of ``chunk`` as a model_express.model.FileChunk."""
    builder = FileChunkBuilder(chunk.header())
    builder.data[:] = chunk.data
    return builder.build()


def passthrough(message: bytes) -> bytes:
    """Response serializer for messages that are already encoded."""
    return message
