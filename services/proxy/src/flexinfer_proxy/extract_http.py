"""The model-extraction cascade over an ASGI request, and the body to forward.

X-Model-ID > /model/<name>/ path prefix (stripped before forwarding) > JSON body ``model``
> multipart/form-data ``model`` field. Bodies are read up to ``parse_cap_bytes``; what is
beyond streams to the engine as the client sends it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from starlette.types import Receive, Scope

from flexinfer_proxy.body_stream import BodyStream, BodyTooLargeError, read_prefix
from flexinfer_proxy.core.errors import BadRequestError
from flexinfer_proxy.core.extract import (
    ScannedBody,
    check_model_name,
    multipart_model,
    parse_json_body,
    scan_json_prefix,
    splice_model,
    split_model_path,
)
from flexinfer_proxy.settings import ProxySettings


@dataclass(slots=True)
class IncomingRequest:
    """A request whose model is known, with the body to forward."""

    name: str
    """The model name the client asked for."""
    forward_path: str | None
    """The path to forward when a /model/<name>/ prefix was stripped (else the original)."""
    body: bytes | BodyStream
    length: int | None
    """Content-Length of a streamed body when the client declared one."""
    fields: dict[str, Any] | None
    """Top-level JSON fields read (all of them for a body within the parse cap)."""
    json_model: str | None = None
    span: tuple[int, int] | None = None

    @property
    def stream(self) -> bool:
        """Whether the client asked for a streamed (SSE) answer."""
        return bool(self.fields and self.fields.get("stream") is True)

    def rewrite(self, upstream_name: str) -> None:
        """Put ``upstream_name`` in the JSON body's ``model``, if it differs (no-op else)."""
        if self.json_model is None or self.json_model == upstream_name:
            return
        if isinstance(self.body, bytes):
            assert self.fields is not None
            self.fields = {**self.fields, "model": upstream_name}
            self.body = json.dumps(self.fields, ensure_ascii=False).encode()
        elif self.span is not None:
            old = len(self.body.prefix)
            self.body.prefix = splice_model(self.body.prefix, self.span, upstream_name)
            if self.length is not None:
                self.length += len(self.body.prefix) - old
        self.json_model = upstream_name


def header_value(scope: Scope, name: bytes) -> bytes | None:
    """The first value of request header ``name`` (lowercase), if any."""
    for key, value in scope["headers"]:
        if key == name:
            return bytes(value)
    return None


def _declared_length(scope: Scope, limit: int) -> int | None:
    raw = header_value(scope, b"content-length")
    if raw is None:
        return None
    try:
        declared = int(raw)
    except ValueError:
        raise BadRequestError("invalid Content-Length header") from None
    if declared < 0:
        raise BadRequestError("invalid Content-Length header")
    if declared > limit:
        raise BodyTooLargeError(f"request body exceeds {limit} bytes")
    return declared


async def extract_request(
    scope: Scope, receive: Receive, settings: ProxySettings
) -> IncomingRequest:
    """Find the model and prepare the body; 4xx errors for anything malformed."""
    length, name, forward_path = _from_head(scope, settings)
    prefix, more = await read_prefix(
        receive, settings.parse_cap_bytes, settings.max_body_bytes, settings.body_timeout_s
    )
    return _from_body(scope, settings, name, forward_path, prefix, more, length, receive)


def extract_complete(scope: Scope, body: bytes, settings: ProxySettings) -> IncomingRequest:
    """``extract_request`` for a body that arrived whole (and is within the parse cap)."""
    length, name, forward_path = _from_head(scope, settings)
    if len(body) > settings.max_body_bytes:
        raise BodyTooLargeError(f"request body exceeds {settings.max_body_bytes} bytes")
    return _from_body(scope, settings, name, forward_path, body, False, length, None)


def _from_head(scope: Scope, settings: ProxySettings) -> tuple[int | None, str | None, str | None]:
    """Declared length, and the model name and forward path from the header or path."""
    length = _declared_length(scope, settings.max_body_bytes)
    name: str | None = None
    header = header_value(scope, b"x-model-id")
    if header is not None:
        name = check_model_name(header.decode("latin-1").strip(), "X-Model-ID")
    forward_path = None
    split = split_model_path(scope["path"])
    if split is not None:
        path_name, forward_path = split
        name = name or path_name
    return length, name, forward_path


def _from_body(
    scope: Scope,
    settings: ProxySettings,
    name: str | None,
    forward_path: str | None,
    prefix: bytes,
    more: bool,
    length: int | None,
    receive: Receive | None,
) -> IncomingRequest:
    content_type = (header_value(scope, b"content-type") or b"").lower()
    scanned: ScannedBody | None = None
    if content_type.startswith(b"multipart/form-data"):
        if name is None:
            name = multipart_model(content_type, prefix)
    elif prefix or not more:
        scanned = _scan(prefix, more, need_model=name is None)
        if name is None:
            name = scanned.model
    if name is None:
        where = f"within the first {settings.parse_cap_bytes} bytes of the body" if more else ""
        raise BadRequestError(f"you must provide a model parameter {where}".strip(), field="model")
    check_model_name(name, "model")
    body: bytes | BodyStream = prefix
    if more:
        assert receive is not None
        body = BodyStream(
            prefix,
            receive,
            received=len(prefix),
            limit=settings.max_body_bytes,
            idle_s=settings.body_timeout_s,
        )
    return IncomingRequest(
        name=name,
        forward_path=forward_path,
        body=body,
        length=length if more else None,
        fields=scanned.data if scanned else None,
        json_model=scanned.model if scanned else None,
        span=scanned.span if scanned else None,
    )


def _scan(prefix: bytes, more: bool, *, need_model: bool) -> ScannedBody:
    if not more:
        if not prefix.strip() and not need_model:
            return ScannedBody({}, None, None, True)
        return parse_json_body(prefix)
    return scan_json_prefix(prefix)
