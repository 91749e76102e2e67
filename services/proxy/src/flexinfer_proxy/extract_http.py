"""The model-extraction cascade over a client request, and the body to forward.

X-Model-ID > /model/<name>/ path prefix (stripped before forwarding) > JSON body ``model``
> multipart/form-data ``model`` field. Bodies are read up to ``parse_cap_bytes``; what is
beyond streams to the engine as the client sends it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from flexinfer_common.errors import BodyTooLargeError
from flexinfer_common.http1.body_stream import BodyStream, read_prefix
from flexinfer_common.http1.downstream import Downstream
from flexinfer_proxy.core.errors import BadRequestError
from flexinfer_proxy.core.extract import (
    ScannedBody,
    check_model_name,
    check_stream,
    insert_model,
    multipart_model,
    parse_json_body,
    scan_json_prefix,
    splice_model,
)
from flexinfer_proxy.core.target import RequestTarget
from flexinfer_proxy.settings import ProxySettings


@dataclass(slots=True)
class IncomingRequest:
    """A request whose model is known, with the body to forward."""

    name: str
    """The model name the client asked for (not checked yet: a name the catalog knows is
    valid, any other is checked with ``check_model_name`` before the store is asked)."""
    body: bytes | BodyStream
    length: int | None
    """Content-Length of a streamed body when the client declared one."""
    fields: dict[str, Any] | None
    """Top-level JSON fields read (all of them for a body within the parse cap)."""
    json_model: str | None = None
    span: tuple[int, int] | None = None
    """Byte offsets of the ``model`` value in a streamed body's prefix, when found there."""

    @property
    def stream(self) -> bool:
        """Whether the client asked for a streamed (SSE) answer."""
        return bool(self.fields and self.fields.get("stream") is True)

    def rewrite(self, upstream_name: str) -> None:
        """Make a JSON body's ``model`` ``upstream_name`` (set if the body had none)."""
        if self.fields is None or self.json_model == upstream_name:
            return
        if isinstance(self.body, bytes):
            self.fields = {**self.fields, "model": upstream_name}
            # ASCII escapes: a lone surrogate the client escaped stays escaped, valid UTF-8.
            self.body = json.dumps(self.fields).encode()
        else:
            old = len(self.body.prefix)
            if self.span is not None:
                self.body.prefix = splice_model(self.body.prefix, self.span, upstream_name)
            else:
                self.body.prefix = insert_model(self.body.prefix, upstream_name)
            if self.length is not None:
                self.length += len(self.body.prefix) - old
        self.json_model = upstream_name


def _declared_length(ds: Downstream, limit: int) -> int | None:
    raw = ds.header(b"content-length")
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


def _named(ds: Downstream, target: RequestTarget) -> str | None:
    """The model the X-Model-ID header or the path prefix names, if either does."""
    header = ds.header(b"x-model-id")
    if header is None:
        return target.model
    try:
        text = header.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise BadRequestError("X-Model-ID is not UTF-8", field="model") from None
    return check_model_name(text, "X-Model-ID")


def request_now(
    ds: Downstream, target: RequestTarget, settings: ProxySettings
) -> IncomingRequest | None:
    """``read_request`` for a body that arrived whole (no waiting); None if it did not."""
    body = ds.body_now()
    if body is None:
        return None
    length = _declared_length(ds, settings.max_body_bytes)
    if len(body) > settings.max_body_bytes:
        raise BodyTooLargeError(f"request body exceeds {settings.max_body_bytes} bytes")
    return _from_body(ds, settings, _named(ds, target), body, False, length)


async def read_request(
    ds: Downstream, target: RequestTarget, settings: ProxySettings
) -> IncomingRequest:
    """Find the model and prepare the body; 4xx errors for anything malformed."""
    length = _declared_length(ds, settings.max_body_bytes)
    name = _named(ds, target)
    body, more = await read_prefix(
        ds.receive, settings.parse_cap_bytes, settings.max_body_bytes, settings.body_timeout_s
    )
    return _from_body(ds, settings, name, body, more, length)


def _from_body(
    ds: Downstream,
    settings: ProxySettings,
    name: str | None,
    prefix: bytes,
    more: bool,
    length: int | None,
) -> IncomingRequest:
    content_type = (ds.header(b"content-type") or b"").strip().lower()
    if not content_type:
        # Every proxied route takes JSON (or a multipart form): a body of no declared type
        # is a client bug, answered here rather than guessed at or forwarded.
        raise BadRequestError(
            "The request has no Content-Type header: send the body as JSON with "
            "Content-Type: application/json (or multipart/form-data for uploads)."
        )
    scanned: ScannedBody | None = None
    if content_type.startswith(b"multipart/form-data"):
        if name is None:
            name = multipart_model(content_type, prefix)
    elif name is None or (prefix and not prefix.isspace()):
        scanned = parse_json_body(prefix) if not more else scan_json_prefix(prefix)
        check_stream(scanned.data)
        if name is None:
            name = scanned.model
    if name is None:
        where = f"within the first {settings.parse_cap_bytes} bytes of the body" if more else ""
        raise BadRequestError(f"you must provide a model parameter {where}".strip(), field="model")
    body: bytes | BodyStream = prefix
    if more:
        body = BodyStream(
            prefix,
            ds.receive,
            received=len(prefix),
            limit=settings.max_body_bytes,
            idle_s=settings.body_timeout_s,
        )
    return IncomingRequest(
        name=name,
        body=body,
        length=length if more else None,
        fields=scanned.data if scanned else None,
        json_model=scanned.model if scanned else None,
        span=scanned.span if scanned else None,
    )
