"""Forward a request to an engine over pooled keep-alive connections and relay the answer.

The answer is passed through chunk by chunk as raw bytes (no decoding, no buffering), so
streams reach the client as the engine produces them.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterable, Iterable

from starlette.types import Scope, Send

from flexinfer_common.errors import UnavailableError
from flexinfer_proxy.settings import ProxySettings
from flexinfer_proxy.upstream import (
    ConnectFailedError,
    RequestFailedError,
    UpstreamPool,
    UpstreamReadError,
    UpstreamResponse,
)

log = logging.getLogger(__name__)

_HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"te",
        b"trailer",
        b"trailers",
        b"transfer-encoding",
        b"upgrade",
    }
)
# Request headers the client sets for its hop to us; the upstream client sets its own.
_DROP_REQUEST = _HOP_BY_HOP | {b"host", b"content-length", b"expect"}
# The server adds its own date and server headers.
_DROP_RESPONSE = _HOP_BY_HOP | {b"date", b"server"}


class UpstreamConnectError(UnavailableError):
    """The engine refused or timed out the connection: nothing was sent, retry elsewhere."""


class UpstreamError(UnavailableError):
    """The engine failed after the request was sent (do not retry: it may have run)."""

    code = "upstream_error"


class UpstreamBrokenError(Exception):
    """The engine died mid-response; raised so the server aborts the client connection."""


def create_client(settings: ProxySettings) -> UpstreamPool:
    """The app's upstream client: pooled keep-alive connections (use with ``async with``)."""
    return UpstreamPool(
        connect_timeout=settings.connect_timeout_s,
        read_timeout=settings.read_timeout_s,
        max_connections=settings.max_connections,
        max_idle=settings.max_keepalive_connections,
    )


def request_headers(scope: Scope) -> list[tuple[bytes, bytes]]:
    """The client's headers minus hop-by-hop ones and those the client sets itself."""
    return [(k, v) for k, v in scope["headers"] if k not in _DROP_REQUEST]


def response_headers(headers: Iterable[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """The engine's response headers minus hop-by-hop ones."""
    return [(k, v) for k, v in headers if k.lower() not in _DROP_RESPONSE]


async def open_upstream(
    client: UpstreamPool,
    base_url: str,
    scope: Scope,
    body: bytes | AsyncIterable[bytes],
    forward_path: str | None = None,
    length: int | None = None,
) -> UpstreamResponse:
    """Send the request to ``base_url`` and return the response with its body unread.

    ``forward_path`` replaces the request path (a stripped /model/<name>/ prefix); a
    streamed ``body`` of known ``length`` is sent with that Content-Length, else chunked.
    """
    if forward_path is not None:
        path = forward_path.encode("latin-1", "replace")
    else:
        path = scope.get("raw_path") or scope["path"].encode()
    query = scope.get("query_string")
    if query:
        path += b"?" + query
    try:
        return await client.request(
            base_url, scope["method"].encode(), path, request_headers(scope), body, length
        )
    except ConnectFailedError as exc:
        raise UpstreamConnectError(str(exc)) from exc
    except RequestFailedError as exc:
        raise UpstreamError(f"upstream {base_url} failed: {exc}") from exc


def sse_error_event(message: str) -> bytes:
    """A final SSE event carrying an OpenAI error, so stream readers stop with an error."""
    body = {"error": {"message": message, "type": "server_error", "code": "upstream_error"}}
    return b"\n\ndata: " + json.dumps(body).encode() + b"\n\n"


async def relay(response: UpstreamResponse, send: Send, *, started: bool = False) -> None:
    """Stream ``response`` to the client; closes it whatever happens.

    ``started``: the response start (an SSE stream) was already sent to the client; only
    the body is relayed, and a broken upstream ends it with an SSE error event.
    """
    try:
        content_type = response.content_type or b""
        is_sse = started or content_type.startswith(b"text/event-stream")
        if not started:
            headers = response_headers(response.headers)
            if is_sse:
                # An SSE stream may get a final error event appended: no fixed length.
                headers = [(k, v) for k, v in headers if k.lower() != b"content-length"]
            await send(
                {"type": "http.response.start", "status": response.status_code, "headers": headers}
            )
        if response.complete:
            # The usual non-streaming answer: it arrived with its head; one send.
            body = response.read_buffered()
            await send({"type": "http.response.body", "body": body, "more_body": False})
            return
        try:
            async for chunk in response.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        except (UpstreamReadError, TimeoutError) as exc:
            log.warning("upstream %s broke mid-response: %r", response.url, exc)
            if not is_sse:
                raise UpstreamBrokenError(f"upstream broke mid-response: {exc!r}") from exc
            tail = sse_error_event(f"the model server failed mid-stream: {exc!r}")
            await send({"type": "http.response.body", "body": tail, "more_body": False})
            return
        await send({"type": "http.response.body", "body": b"", "more_body": False})
    finally:
        await response.aclose()
