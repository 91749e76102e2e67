"""FileChunk decoded by hand, its data a view of the received message.

Parsing one with protobuf copies the data twice (into the message, then out of it on
``.data``), so the client decodes it here instead. The decoder accepts what protobuf's own
parser accepts for FileChunk (any field order, repeats where the last wins, unknown fields
and groups skipped, a known field with an unexpected wire type treated as unknown) and
rejects what it rejects.
"""

from __future__ import annotations

from dataclasses import dataclass

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
