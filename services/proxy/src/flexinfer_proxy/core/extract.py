"""Find the requested model: X-Model-ID, a /model/<name>/ path prefix, the JSON body, a
multipart form field, in that order; and read JSON bodies only as far as needed.

A JSON body that fits within the parse cap is parsed whole (its fields feed routing keys).
A longer one is scanned: top-level members are decoded until ``model`` is found, and the
rest of the body streams through untouched. The scanner decodes the prefix as UTF-8 with
``surrogateescape`` (a prefix may end inside a character), which maps back to exactly the
same bytes, so a rewrite splices the value into the client's bytes at the right offsets.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from flexinfer_proxy.core.errors import BadRequestError

_DECODER = json.JSONDecoder()
_SCAN: Callable[[str, int], tuple[Any, int]] = _DECODER.scan_once  # type: ignore[attr-defined]
"""The decoder's C scanner: the JSON value at an index of a text, and where it ends."""
_JSON_SPACE = " \t\n\r"
"""The whitespace JSON allows between tokens (RFC 8259 2), and nothing else."""


def _decode_object(text: str) -> Any:
    """``json.loads`` of a text that begins with ``{``, without its wrappers: the decoder's
    C scanner reads the object, and only whitespace may follow it."""
    try:
        data, end = _SCAN(text, 0)
    except StopIteration as exc:  # a member with no value: json.loads says the same
        raise json.JSONDecodeError("Expecting value", text, exc.value) from None
    if end != len(text):
        rest = len(text[end:].lstrip(_JSON_SPACE))
        if rest:
            raise json.JSONDecodeError("Extra data", text, len(text) - rest)
    return data


_WS = re.compile(r"[ \t\n\r]*")
_MAX_NAME = 256
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def check_model_name(name: str, where: str) -> str:
    """Reject names no Model can have: empty, too long, control characters, traversal."""
    if not name:
        raise BadRequestError(f"{where}: model must be a non-empty string", field="model")
    if len(name) > _MAX_NAME:
        raise BadRequestError(f"{where}: model name is longer than {_MAX_NAME}", field="model")
    if _CONTROL.search(name):
        raise BadRequestError(f"{where}: model name has control characters", field="model")
    if not name.isprintable():  # also lone surrogates ("\\ud800"), which cannot be encoded
        raise BadRequestError(f"{where}: model name is not printable text", field="model")
    if ".." in name.split("/") or name.startswith("/") or "\\" in name:
        raise BadRequestError(f"{where}: model name is not a valid name", field="model")
    return name


@dataclass(slots=True)
class ScannedBody:
    """What a (possibly partial) JSON body says: its top-level fields seen, and ``model``."""

    data: dict[str, Any]
    model: str | None
    span: tuple[int, int] | None
    """Byte offsets of the ``model`` value (quotes included) in the prefix, when found."""
    complete: bool
    """True when ``data`` holds every member: the whole body was parsed."""


def parse_json_body(raw: bytes) -> ScannedBody:
    """Parse a whole JSON object body; BadRequestError when malformed."""
    try:
        # A UTF-8 object (every OpenAI client) skips json.loads' encoding detection.
        if raw[:1] == b"{" and b"\x00" not in raw[:4]:
            data = _decode_object(raw.decode("utf-8", "surrogatepass"))
        else:
            data = json.loads(raw)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise BadRequestError(f"request body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise BadRequestError("request body must be a JSON object")
    model = data.get("model")
    if model is not None and not isinstance(model, str):
        raise BadRequestError("model must be a string", field="model")
    return ScannedBody(data=data, model=model, span=None, complete=True)


def scan_json_prefix(prefix: bytes) -> ScannedBody:
    """Decode top-level members of a JSON object from its first bytes until ``model``.

    The scan stops at the first member it cannot decode: the prefix may end anywhere (in
    a literal, a number, an escape), and what cannot be told from a cut is left to the
    engine, which reads the whole body. Members found before are reported; a body that
    is not an object, or whose ``model`` is not a string, is a BadRequestError.
    """
    text = prefix.decode("utf-8", "surrogateescape")
    pos = _WS.match(text, 0).end()  # type: ignore[union-attr]
    if not text.startswith("{", pos):
        raise BadRequestError("request body must be a JSON object")
    pos += 1
    data: dict[str, Any] = {}
    while True:
        pos = _WS.match(text, pos).end()  # type: ignore[union-attr]
        if pos >= len(text):
            break
        if text[pos] == "}":
            return ScannedBody(data, _model_of(data), None, True)
        if text[pos] == ",":
            pos = _WS.match(text, pos + 1).end()  # type: ignore[union-attr]
        try:
            key, pos = _DECODER.raw_decode(text, pos)
            pos = _WS.match(text, pos).end()  # type: ignore[union-attr]
            if pos >= len(text):
                break
            if text[pos] != ":":
                _raise_bad()
            pos = _WS.match(text, pos + 1).end()  # type: ignore[union-attr]
            start = pos
            value, pos = _DECODER.raw_decode(text, pos)
        except (json.JSONDecodeError, RecursionError):
            break  # cut by the prefix end, or malformed: the engine will say which
        if pos >= len(text):
            break  # a number or literal may continue past the prefix
        if not isinstance(key, str):
            _raise_bad()
        data[key] = value
        if key == "model":
            if not isinstance(value, str):
                raise BadRequestError("model must be a string", field="model")
            return ScannedBody(data, value, (_offset(text, start), _offset(text, pos)), False)
    return ScannedBody(data, None, None, False)


def _offset(text: str, index: int) -> int:
    """The byte offset in the prefix of character ``index`` of its decoded text."""
    return len(text[:index].encode("utf-8", "surrogateescape"))


def _raise_bad() -> None:
    raise BadRequestError("request body is not valid JSON")


def _model_of(data: dict[str, Any]) -> str | None:
    model = data.get("model")
    if model is not None and not isinstance(model, str):
        raise BadRequestError("model must be a string", field="model")
    return model


def check_stream(data: dict[str, Any]) -> None:
    """``stream`` is a JSON boolean (or null), as OpenAI requires: the proxy reads it to
    choose its own answer (an SSE progress stream while a model starts), and a backend
    that coerced ``"yes"`` or ``1`` would answer otherwise than OpenAI does."""
    stream = data.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise BadRequestError(
            "Invalid value for 'stream': Input should be a valid boolean.", field="stream"
        )


def insert_model(prefix: bytes, name: str) -> bytes:
    """``prefix`` (the first bytes of a JSON object with members) with ``model`` first."""
    start = prefix.index(b"{") + 1
    return prefix[:start] + b'"model": ' + json.dumps(name).encode() + b", " + prefix[start:]


def splice_model(prefix: bytes, span: tuple[int, int], name: str) -> bytes:
    """``prefix`` with the ``model`` value at ``span`` replaced by ``name`` (JSON-quoted)."""
    return prefix[: span[0]] + json.dumps(name).encode() + prefix[span[1] :]


_BOUNDARY = re.compile(rb'boundary="?([^";]+)"?', re.IGNORECASE)
_MODEL_PART = re.compile(rb'content-disposition:[^\r\n]*name="?model"?[^\r\n]*\r\n', re.I)


def multipart_model(content_type: bytes, prefix: bytes) -> str | None:
    """The ``model`` form field of a multipart body, if within ``prefix``."""
    match = _BOUNDARY.search(content_type)
    if match is None:
        raise BadRequestError("multipart/form-data without a boundary")
    delimiter = b"--" + match.group(1)
    # Only parts followed by another delimiter are complete within the prefix.
    for part in prefix.split(delimiter)[1:-1]:
        head, sep, value = part.partition(b"\r\n\r\n")
        if not sep or _MODEL_PART.search(head + b"\r\n") is None:
            continue
        if b"filename=" in head.lower():
            continue
        try:
            return value[:-2].decode("utf-8")
        except UnicodeDecodeError:
            raise BadRequestError("multipart model field is not UTF-8") from None
    return None
