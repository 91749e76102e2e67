"""Fuzzing the extraction cascade and the target check: properties over generated input.

CI runs 300 examples per property; ``python bench/fuzz_proxy.py --examples N`` runs the
same properties longer (it sets FLEXINFER_FUZZ_EXAMPLES).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import urllib.parse

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flexinfer_proxy.core.errors import BadRequestError, RouteNotFoundError
from flexinfer_proxy.core.extract import (
    insert_model,
    multipart_model,
    parse_json_body,
    scan_json_prefix,
    splice_model,
)
from flexinfer_proxy.core.target import parse_target

EXAMPLES = settings(
    max_examples=int(os.environ.get("FLEXINFER_FUZZ_EXAMPLES", "300")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
FORBIDDEN = {chr(c) for c in range(0x21)} | {chr(c) for c in range(0x7F, 0xA0)}

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)
names = st.text(min_size=1, max_size=40)
objects = st.dictionaries(st.text(max_size=12), json_values, max_size=6)


@EXAMPLES
@given(st.binary(max_size=512))
def test_any_bytes_parse_or_are_a_bad_request(raw: bytes) -> None:
    for parse in (parse_json_body, scan_json_prefix):
        with contextlib.suppress(BadRequestError):
            parse(raw)
    with contextlib.suppress(BadRequestError):
        multipart_model(b"multipart/form-data; boundary=b", raw)


def _agrees_with_json_loads(raw: bytes) -> None:
    """parse_json_body reads a body as json.loads does, and refuses what it refuses with
    json's own reason."""
    try:
        expected = json.loads(raw)
    except ValueError as exc:
        with pytest.raises(BadRequestError, match=re.escape(str(exc))):
            parse_json_body(raw)
        return
    if not isinstance(expected, dict):
        return
    if isinstance(expected.get("model", ""), str):
        assert parse_json_body(raw).data == expected
    else:
        with pytest.raises(BadRequestError, match="model must be a string"):
            parse_json_body(raw)


@EXAMPLES
@given(objects, st.text(alphabet=" \t\n\r\x0c\xa0}x", max_size=3))
def test_a_whole_body_parses_as_json_loads_does(fields: dict[str, object], tail: str) -> None:
    _agrees_with_json_loads((json.dumps(fields) + tail).encode())


@EXAMPLES
@given(st.binary(max_size=64))
def test_any_object_like_bytes_parse_as_json_loads_does(raw: bytes) -> None:
    _agrees_with_json_loads(b"{" + raw)
    _agrees_with_json_loads(b'{"a": ' + raw)


@EXAMPLES
@given(objects, names, st.booleans())
def test_the_model_is_found_whole_and_in_every_prefix(
    fields: dict[str, object], model: str, ascii_only: bool
) -> None:
    document = {**fields, "model": model}
    raw = json.dumps(document, ensure_ascii=ascii_only).encode()
    assert parse_json_body(raw).model == model
    for cut in range(1, len(raw) + 1, max(1, len(raw) // 16)):
        scanned = scan_json_prefix(raw[:cut])
        assert scanned.model in (None, model)  # never a different model
        if scanned.span is not None:
            spliced = splice_model(raw[:cut], scanned.span, "x/y") + raw[cut:]
            assert json.loads(spliced) == {**document, "model": "x/y"}


@EXAMPLES
@given(objects.filter(bool), names)
def test_an_inserted_model_keeps_the_document_and_wins_nothing_else(
    fields: dict[str, object], model: str
) -> None:
    raw = json.dumps({k: v for k, v in fields.items() if k != "model"}).encode()
    if raw == b"{}":
        return
    assert json.loads(insert_model(raw, model)) == {**json.loads(raw), "model": model}


@EXAMPLES
@given(names, st.binary(max_size=64))
def test_a_multipart_model_field_is_found(model: str, payload: bytes) -> None:
    boundary = b"fuzzboundary1234"
    body = (
        b"--"
        + boundary
        + b'\r\nContent-Disposition: form-data; name="file"; filename="a"\r\n\r\n'
        + payload.replace(boundary, b"")
        + b"\r\n--"
        + boundary
        + b'\r\nContent-Disposition: form-data; name="model"\r\n\r\n'
        + model.encode()
        + b"\r\n--"
        + boundary
        + b"--\r\n"
    )
    found = multipart_model(b"multipart/form-data; boundary=" + boundary, body)
    assert found == model


@EXAMPLES
@given(st.binary(max_size=200))
def test_any_target_is_checked_and_forwarded_as_a_slice(raw: bytes) -> None:
    target = b"/" + raw
    try:
        checked = parse_target(target)
    except (BadRequestError, RouteNotFoundError):
        return
    assert target.endswith(checked.forward)  # raw bytes of the client, never re-encoded
    assert not FORBIDDEN & set(checked.route)
    assert not FORBIDDEN & set(urllib.parse.unquote(checked.forward.decode("ascii")))
    segments = checked.route.split("/")[1:]
    assert not {".", ".."} & set(segments)
    assert "" not in segments


def _acceptable(name: str, route: str, query: str) -> bool:
    """What parse_target must accept: a name, nothing forbidden, a normalised route."""
    segments = ("/" + route).split("/")[1:]
    return (
        bool(name)
        and not FORBIDDEN & set(name + route + query)
        and "\\" not in route
        and not {"", ".", ".."} & set(segments)
    )


@EXAMPLES
@given(st.text(max_size=30), st.text(max_size=30), st.text(max_size=30))
def test_encoded_targets_decode_to_what_was_checked(name: str, route: str, query: str) -> None:
    raw = (
        "/model/"
        + urllib.parse.quote(name, safe="")
        + "/"
        + urllib.parse.quote(route, safe="/")
        + "?q="
        + urllib.parse.quote(query, safe="")
    ).encode()
    try:
        checked = parse_target(raw)
    except (BadRequestError, RouteNotFoundError):
        assert not _acceptable(name, route, query)
        return
    assert _acceptable(name, route, query)
    assert checked.model == name
    assert checked.route == "/" + route
    assert raw.endswith(checked.forward)
