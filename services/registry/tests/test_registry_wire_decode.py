"""decode_file_chunk: accepts and rejects exactly what protobuf's parser does, without copying."""

from __future__ import annotations

import itertools
import random

import pytest
from google.protobuf.message import DecodeError

from flexinfer_registry._generated.model_express import model_pb2
from flexinfer_registry.client.chunk_decoder import (
    FileChunkView,
    WireFormatError,
    decode_file_chunk,
)
from flexinfer_registry.core.files import Chunk
from flexinfer_registry.server.chunks import encode_file_chunk, varint

Fields = tuple[str, bytes, int, int, bool, bool, str | None]


def tag(field: int, wire_type: int) -> bytes:
    return varint(field << 3 | wire_type)


def text(field: int, raw: bytes) -> bytes:
    return tag(field, 2) + varint(len(raw)) + raw


def decoded(message: bytes) -> Fields:
    view = decode_file_chunk(message)
    return (view.relative_path, bytes(view.data), view.offset, view.total_size,
            view.is_last_chunk, view.is_last_file, view.commit_hash)  # fmt: skip


def parsed(message: bytes) -> Fields:
    """What protobuf itself makes of ``message``."""
    m = model_pb2.FileChunk.FromString(message)
    commit = m.commit_hash if m.HasField("commit_hash") else None
    return (m.relative_path, m.data, m.offset, m.total_size,
            m.is_last_chunk, m.is_last_file, commit)  # fmt: skip


CHUNKS = [
    Chunk(path, data, offset, offset + len(data) + extra, last_chunk, last_file, commit)
    for path, data, offset, extra, last_chunk, last_file, commit in itertools.product(
        ["", "a", "dir/ü.bin", "p" * 300],
        [b"", b"\x00", bytes(range(256)) * 5],
        [0, 1, 127, 128, (1 << 32) + 5, (1 << 64) - 1290],  # offset + size < 2**64
        [0, 9],
        [False, True],
        [False, True],
        [None, "", "c" * 40],
    )
]


def test_decode_inverts_encode() -> None:
    for chunk in CHUNKS:
        message = encode_file_chunk(chunk)
        view = decode_file_chunk(message)
        assert view == FileChunkView(chunk.relative_path, memoryview(chunk.data), chunk.offset,
                                     chunk.total_size, chunk.is_last_chunk, chunk.is_last_file,
                                     chunk.commit_hash)  # fmt: skip
        assert decoded(message) == parsed(message)


def test_data_is_a_view_of_the_message() -> None:
    message = encode_file_chunk(Chunk("a", b"xyz" * 1000, 0, 3000, True, True, None))
    view = decode_file_chunk(message)
    assert view.data.obj is message
    assert view.data.readonly
    assert view.data.nbytes == 3000
    assert decode_file_chunk(b"").data.nbytes == 0


def test_protobuf_serialised_chunks_decode_alike() -> None:
    for chunk in CHUNKS[::7]:
        message = model_pb2.FileChunk(
            relative_path=chunk.relative_path, data=bytes(chunk.data), offset=chunk.offset,
            total_size=chunk.total_size, is_last_chunk=chunk.is_last_chunk,
            is_last_file=chunk.is_last_file, commit_hash=chunk.commit_hash,
        ).SerializeToString()  # fmt: skip
        assert decoded(message) == parsed(message)
        assert decoded(message)[-1] == chunk.commit_hash


BASE = encode_file_chunk(Chunk("w.bin", b"DATA", 1 << 33, (1 << 33) + 9, True, False, "abc"))
BASE_FIELDS = ("w.bin", b"DATA", 1 << 33, (1 << 33) + 9, True, False, "abc")

UNKNOWN = {
    "varint": tag(9, 0) + varint(1 << 63),
    "fixed64": tag(10, 1) + b"\xff" * 8,
    "length-delimited": text(11, b"\xff\xfe not UTF-8, not ours to check"),
    "fixed32": tag(12, 5) + b"\x01\x02\x03\x04",
    "group": tag(13, 3) + tag(2, 2) + varint(1) + b"x" + tag(13, 4),
    "nested groups": tag(14, 3) + tag(15, 3) + tag(1, 5) + b"abcd" + tag(15, 4) + tag(14, 4),
    "highest field number": tag((1 << 29) - 1, 0) + varint(7),
    "known field, other wire type": tag(1, 0) + varint(5) + tag(2, 5) + b"zzzz",
    "empty group": tag(16, 3) + tag(16, 4),
}


@pytest.mark.parametrize("unknown", UNKNOWN.values(), ids=UNKNOWN.keys())
def test_unknown_fields_are_skipped_anywhere(unknown: bytes) -> None:
    for cut in (0, 7, 13, len(BASE)):  # before, between and after our fields
        message = BASE[:cut] + unknown + BASE[cut:]
        assert decoded(message) == BASE_FIELDS == parsed(message)


OTHER_ENCODINGS = {
    "reversed field order": text(7, b"abc") + tag(6, 0) + b"\x00" + tag(5, 0) + b"\x01"
    + tag(4, 0) + varint((1 << 33) + 9) + tag(3, 0) + varint(1 << 33) + text(2, b"DATA")
    + text(1, b"w.bin"),
    "repeats: the last wins": text(1, b"old") + text(2, b"OLD!") + tag(3, 0) + varint(1)
    + text(7, b"zzz") + tag(5, 0) + b"\x00" + BASE,
    "defaults written out": text(1, b"") + text(2, b"") + tag(3, 0) + b"\x00" + BASE,
    "padded varints": tag(3, 0) + b"\x80\x80\x00" + BASE[:-5] + b"\xba\x80\x00\x03abc",
    "bool of 2, 10-byte varint": BASE + tag(6, 0) + b"\x82" + b"\x80" * 8 + b"\x00",
    "bits past 64 dropped": BASE + tag(4, 0) + b"\xff" * 9 + b"\x7f",
}  # fmt: skip


@pytest.mark.parametrize("message", OTHER_ENCODINGS.values(), ids=OTHER_ENCODINGS.keys())
def test_other_valid_encodings_decode_as_protobuf_does(message: bytes) -> None:
    assert decoded(message) == parsed(message)


def test_other_encodings_mean_what_they_say() -> None:
    assert decoded(OTHER_ENCODINGS["reversed field order"]) == BASE_FIELDS
    assert decoded(OTHER_ENCODINGS["repeats: the last wins"]) == BASE_FIELDS
    assert decoded(OTHER_ENCODINGS["bool of 2, 10-byte varint"])[5] is True
    assert decoded(OTHER_ENCODINGS["bits past 64 dropped"])[3] == (1 << 64) - 1


MALFORMED = {
    "truncated varint": (tag(3, 0) + b"\x80", "varint truncated"),
    "truncated tag": (BASE + b"\x80", "varint truncated"),
    "varint of 11 bytes": (tag(3, 0) + b"\xff" * 10 + b"\x01", "longer than 10 bytes"),
    "data past the end": (text(2, b"abcdef")[:-2], "field 2 claims 6 bytes"),
    "unknown past the end": (tag(11, 2) + varint(1 << 40) + b"x", "field 11 claims"),
    "truncated fixed64": (tag(10, 1) + b"\x00" * 7, "fixed-size value truncated"),
    "truncated fixed32": (tag(10, 5) + b"\x00" * 3, "fixed-size value truncated"),
    "wire type 6": (tag(9, 6) + b"\x00", "wire type 6 does not exist"),
    "wire type 7": (BASE + tag(1, 7), "wire type 7 does not exist"),
    "stray end-group": (BASE + tag(9, 4), "end-group for field 9 without"),
    "mismatched end-group": (tag(9, 3) + tag(8, 4), "end-group for field 8 without"),
    "unterminated group": (tag(9, 3) + tag(1, 0) + b"\x01", "has no end-group"),
    "groups nested 101 deep": (tag(9, 3) * 101 + tag(9, 4) * 101, "nested deeper than 100"),
    "field number 0": (b"\x00\x01", "field number 0"),
    "padded field number 0": (b"\x82\x00\x00", "field number 0"),
    "tag over 32 bits": (b"\x80\x80\x80\x80\x10\x00", "does not fit 32 bits"),
    "tag of 6 bytes": (b"\x88\x80\x80\x80\x80\x00\x00", "does not fit 32 bits"),
    "path not UTF-8": (text(1, b"a\xffb"), "relative_path is not valid UTF-8"),
    "surrogate in path": (text(1, b"\xed\xa0\x80"), "relative_path is not valid UTF-8"),
    "overlong in path": (text(1, b"\xc0\xaf"), "relative_path is not valid UTF-8"),
    "bad path overwritten": (text(1, b"\xff") + BASE, "relative_path is not valid UTF-8"),
    "commit not UTF-8": (BASE + text(7, b"\x80"), "commit_hash is not valid UTF-8"),
}


@pytest.mark.parametrize(
    ("message", "reason"), MALFORMED.values(), ids=MALFORMED.keys()
)  # fmt: skip
def test_malformed_chunks_raise_wire_format_error(message: bytes, reason: str) -> None:
    with pytest.raises(WireFormatError, match=reason):
        decode_file_chunk(message)
    with pytest.raises(DecodeError):  # protobuf rejects it too: it really is malformed
        model_pb2.FileChunk.FromString(message)


def test_damaged_messages_fail_only_as_protobuf_does() -> None:
    """Every prefix and thousands of one-byte corruptions: the same verdict as protobuf."""
    sample = BASE + b"".join(UNKNOWN.values()) + OTHER_ENCODINGS["padded varints"]
    damaged = [sample[:cut] for cut in range(len(sample))]
    rng = random.Random(1234)
    for _ in range(5000):
        at = rng.randrange(len(sample))
        damaged.append(sample[:at] + bytes([rng.randrange(256)]) + sample[at + 1 :])
    rejected = 0
    for message in damaged:
        try:
            expected = parsed(message)
        except DecodeError:
            rejected += 1
            with pytest.raises(WireFormatError):
                decode_file_chunk(message)
        else:
            assert decoded(message) == expected, message.hex()
    assert 0 < rejected < len(damaged)
