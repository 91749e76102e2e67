"""Fuzzing the client's FileChunk decoder against protobuf's own (upb) parser.

:data:`messages` is a hypothesis strategy of wire bytes built to reach the decoder's every
branch: FileChunk's fields with their own and with foreign wire types, unknown fields of
every wire type (groups nested, unbalanced, too deep), padded and overlong varints, tags
past 32 bits, strings that are not UTF-8, then truncated or with bytes flipped; plus plain
random bytes. :func:`differential` decodes one message both ways and says what both made
of it, raising AssertionError when they disagree. The registry's tests run it for a few
hundred examples; ``bench/fuzz_registry.py`` runs it for as many as asked.

Needs ``hypothesis`` (a development dependency): import this module only from tests and
benchmarks.
"""

from __future__ import annotations

from google.protobuf.internal import api_implementation
from google.protobuf.message import DecodeError
from hypothesis import strategies as st

from flexinfer_registry._generated.model_express import model_pb2
from flexinfer_registry.client.chunk_decoder import WireFormatError, decode_file_chunk

Fields = tuple[str, bytes, int, int, bool, bool, str | None]


def protobuf_backend() -> str:
    """Which protobuf implementation parses (``upb`` is the one to compare against)."""
    return str(api_implementation.Type())


def varint(value: int) -> bytes:
    """Base-128 varint of any non-negative integer (longer than 10 bytes if asked)."""
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _padded(value: int, extra: int) -> bytes:
    """``value`` as a varint with ``extra`` redundant continuation bytes (still valid up
    to 10 bytes in all)."""
    raw = bytearray(varint(value))
    if extra:
        raw[-1] |= 0x80
        raw += b"\x80" * (extra - 1) + b"\x00"
    return bytes(raw)


def _tag(field: int, wire_type: int) -> bytes:
    return varint(field << 3 | wire_type)


_utf8ish = st.one_of(
    st.text(max_size=20).map(lambda s: s.encode("utf-8", "surrogatepass")),
    st.binary(max_size=20),
    st.sampled_from([b"\xed\xa0\x80", b"\xc0\xaf", b"\xff", b"\xf4\x90\x80\x80", b"a\x00b"]),
)
_numbers = st.one_of(
    st.integers(0, 300),
    st.integers(0, (1 << 64) - 1),
    st.integers(1 << 64, 1 << 72),
    st.sampled_from([0, 1, 127, 128, (1 << 63), (1 << 64) - 1]),
)
_field_numbers = st.one_of(
    st.integers(1, 7),
    st.integers(8, 20),
    st.integers(1, (1 << 29) - 1),
    st.sampled_from([0, (1 << 29) - 1, 1 << 29, 1 << 32]),
)


@st.composite
def _value(draw: st.DrawFn, wire_type: int) -> bytes:
    """The encoded value that follows a tag of ``wire_type`` (sometimes malformed)."""
    if wire_type == 0:
        return _padded(draw(_numbers), draw(st.integers(0, 3)))
    if wire_type == 1:
        return draw(st.binary(min_size=8, max_size=8))
    if wire_type == 5:
        return draw(st.binary(min_size=4, max_size=4))
    if wire_type == 2:
        body = draw(_utf8ish)
        claimed = draw(st.one_of(st.just(len(body)), st.integers(0, len(body) + 3)))
        return varint(claimed) + body
    return b""


@st.composite
def _field(draw: st.DrawFn, depth: int = 0) -> bytes:
    """One field: tag then value; groups hold fields of their own."""
    number = draw(_field_numbers)
    wire_type = draw(st.sampled_from([0, 0, 1, 2, 2, 2, 3, 4, 5, 6, 7]))
    if wire_type == 3 and depth < 3:
        inner = draw(st.lists(_field(depth + 1), max_size=3))
        end = number if draw(st.booleans()) else draw(_field_numbers)
        return _tag(number, 3) + b"".join(inner) + _tag(end, 4)
    return _tag(number, wire_type) + draw(_value(wire_type))


_deep_groups = st.integers(95, 105).map(lambda n: _tag(9, 3) * n + _tag(9, 4) * n)
_odd_tags = st.sampled_from(
    [b"\x00\x01", b"\x82\x00\x00", b"\x80\x80\x80\x80\x10\x00", b"\x88\x80\x80\x80\x80\x00\x00"]
)
_bodies = st.lists(st.one_of(_field(), _odd_tags, _deep_groups), max_size=10).map(b"".join)


@st.composite
def _damaged(draw: st.DrawFn) -> bytes:
    """A body cut short, or with bytes replaced, inserted or removed."""
    body = bytearray(draw(_bodies))
    for _ in range(draw(st.integers(0, 3))):
        if not body:
            break
        at = draw(st.integers(0, len(body) - 1))
        action = draw(st.sampled_from(["flip", "insert", "delete", "cut"]))
        if action == "flip":
            body[at] = draw(st.integers(0, 255))
        elif action == "insert":
            body.insert(at, draw(st.integers(0, 255)))
        elif action == "delete":
            del body[at]
        else:
            del body[at:]
    return bytes(body)


@st.composite
def _valid_field(draw: st.DrawFn) -> bytes:
    """A well-formed field: one of FileChunk's with its own wire type, or a sound unknown
    one (balanced groups included)."""
    number = draw(st.one_of(st.integers(1, 7), st.integers(8, (1 << 29) - 1)))
    if number in (1, 7):
        text = draw(st.text(max_size=30)).encode("utf-8", "surrogatepass")
        if draw(st.booleans()):
            text = draw(st.text(max_size=30)).encode()
        return _tag(number, 2) + varint(len(text)) + text
    if number == 2:
        data = draw(st.binary(max_size=300))
        return _tag(number, 2) + varint(len(data)) + data
    if number <= 6:
        value = draw(st.integers(0, (1 << 64) - 1))
        return _tag(number, 0) + _padded(value, draw(st.integers(0, 10 - len(varint(value)))))
    wire_type = draw(st.sampled_from([0, 1, 2, 3, 5]))
    if wire_type == 3:
        inner = draw(st.lists(_valid_field(), max_size=3))
        return _tag(number, 3) + b"".join(inner) + _tag(number, 4)
    if wire_type == 2:
        body = draw(st.binary(max_size=30))
        return _tag(number, 2) + varint(len(body)) + body
    return _tag(number, wire_type) + draw(_value(wire_type))


_valid = st.lists(_valid_field(), max_size=12).map(b"".join)

messages = st.one_of(_valid, _valid, _bodies, _damaged(), st.binary(max_size=64))
"""Wire bytes to decode: well-formed (two in five), structured, damaged, and random."""


def decoded(message: bytes) -> Fields:
    """What our decoder makes of ``message`` (WireFormatError if it refuses it)."""
    view = decode_file_chunk(message)
    return (view.relative_path, bytes(view.data), view.offset, view.total_size,
            view.is_last_chunk, view.is_last_file, view.commit_hash)  # fmt: skip


def parsed(message: bytes) -> Fields:
    """What protobuf makes of ``message`` (DecodeError if it refuses it)."""
    chunk = model_pb2.FileChunk.FromString(message)
    commit = chunk.commit_hash if chunk.HasField("commit_hash") else None
    return (chunk.relative_path, chunk.data, chunk.offset, chunk.total_size,
            chunk.is_last_chunk, chunk.is_last_file, commit)  # fmt: skip


def differential(message: bytes) -> str:
    """ "accepted" or "rejected", as both parsers agree; AssertionError when they differ."""
    try:
        expected = parsed(message)
    except DecodeError:
        try:
            got = decoded(message)
        except WireFormatError:
            return "rejected"
        raise AssertionError(f"protobuf rejects {message.hex()}, we decode {got!r}") from None
    try:
        got = decoded(message)
    except WireFormatError as exc:
        raise AssertionError(f"protobuf accepts {message.hex()}, we refuse: {exc}") from exc
    assert got == expected, f"{message.hex()}: ours {got!r}, protobuf {expected!r}"
    return "accepted"
