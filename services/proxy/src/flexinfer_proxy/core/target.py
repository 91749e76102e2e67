"""The request target: decoded and checked once, forwarded as the client's raw bytes.

A decoded path written back onto the wire once split one request into two
(``%0D%0A`` became a line break in the upstream request line). So the bytes sent upstream
are always a slice of what the client sent, and the decoded form is only read: to find the
model in a ``/model/<name>/`` prefix and to match the route against the backend's table.
Everything is checked here, in this order: the raw bytes are visible ASCII (400), the
percent escapes decode to UTF-8 with no control character, space or NUL (400), and the
decoded path is normalised (no ``.``/``..`` or empty segments, no backslash; else it is no
route: 404), so that what was checked is what any engine will see.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from flexinfer_proxy.core.errors import BadRequestError, RouteNotFoundError
from flexinfer_proxy.core.surface import MODEL_PREFIX

_VISIBLE = re.compile(rb"[\x21-\x7e]*")
_ABSOLUTE = re.compile(rb"[A-Za-z][A-Za-z0-9+.-]*://[^/?#]*")
"""``http://host`` before an absolute-form target: servers must accept it (RFC 9112 3.2.2)
and use the origin-form part; the authority names no engine here."""
"""Raw target bytes allowed: visible ASCII. Spaces, controls and non-ASCII are refused."""
_ESCAPE = re.compile(rb"%([0-9A-Fa-f]{2})")
_BAD_ESCAPE = re.compile(rb"%(?![0-9A-Fa-f]{2})")
_FORBIDDEN = re.compile(r"[\x00-\x20\x7f-\x9f]")
"""Decoded characters refused anywhere in a target: C0/C1 controls, DEL, space, NUL."""
_PREFIX = MODEL_PREFIX.encode()
MAX_TARGET = 8 * 1024
"""Longest request target: inference routes are short; 8 KiB is what most servers allow."""


@dataclass(frozen=True, slots=True)
class RequestTarget:
    """A checked request target."""

    route: str
    """The decoded path the engine serves (the part after a ``/model/<name>`` prefix)."""
    model: str | None
    """The model named by a ``/model/<name>/`` prefix (decoded), if any."""
    forward: bytes
    """The raw bytes to send upstream as the request-target: the client's own path from the
    route on, and its query."""


def _unquote(raw: bytes, where: str) -> str:
    if _BAD_ESCAPE.search(raw):
        raise BadRequestError(f"invalid percent-encoding in the request {where}")
    decoded = _ESCAPE.sub(lambda m: bytes([int(m.group(1), 16)]), raw)
    try:
        text = decoded.decode("utf-8")
    except UnicodeDecodeError:
        raise BadRequestError(f"the request {where} is not UTF-8 once decoded") from None
    if _FORBIDDEN.search(text):
        raise BadRequestError(
            f"the request {where} has a control character, a space or a NUL once decoded"
        )
    return text


def _check_normalised(path: str) -> None:
    # No route has such a path: what an engine would make of it is not worth guessing.
    if "\\" in path:
        raise RouteNotFoundError("Invalid URL: a route has no backslash")
    for segment in path.split("/")[1:]:
        if segment in ("", ".", ".."):
            raise RouteNotFoundError("Invalid URL: a route has no //, ./ or ../")


@lru_cache(maxsize=256)
def parse_target(raw: bytes) -> RequestTarget:
    """Check ``raw`` (the request-target as received) and split off a model prefix.

    Clients send the same few targets again and again: the verdict is kept for the last
    256 (a target is at most MAX_TARGET bytes, so the cache stays small whatever is sent).
    A refused target raises each time, and is not kept.
    """
    if len(raw) > MAX_TARGET:
        raise BadRequestError(f"the request target is longer than {MAX_TARGET} bytes")
    if not raw.startswith(b"/"):
        absolute = _ABSOLUTE.match(raw)
        if absolute is not None:
            raw = raw[absolute.end() :] or b"/"
    if not raw.startswith(b"/") or _VISIBLE.fullmatch(raw) is None:
        raise BadRequestError("the request target must be a path of visible ASCII characters")
    raw_path, question, raw_query = raw.partition(b"?")
    if b"#" in raw:
        raise BadRequestError("the request target must not carry a fragment")
    if b"%" not in raw_path and not raw_path.startswith(_PREFIX):
        # The usual target: nothing to decode, visible ASCII already checked.
        route = raw_path.decode("ascii")
        if "/." in route or "//" in route or "\\" in route or route.endswith("/"):
            _check_normalised(route)  # the same verdict as the general path below
        if raw_query:
            _unquote(raw_query, "query")
        return RequestTarget(route=route, model=None, forward=raw)
    _unquote(raw_query, "query")
    model = None
    raw_route = raw_path
    if raw_path.startswith(_PREFIX):
        raw_name, slash, rest = raw_path[len(_PREFIX) :].partition(b"/")
        if not slash:
            raise BadRequestError("a /model/<name>/ path must continue after the name")
        model = _unquote(raw_name, "path")
        if not model:
            raise BadRequestError("a /model/<name>/ path must name a model")
        raw_route = b"/" + rest
    route = _unquote(raw_route, "path")
    _check_normalised(route)
    forward = raw_route + question + raw_query
    return RequestTarget(route=route, model=model, forward=forward)
