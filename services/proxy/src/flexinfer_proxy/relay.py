"""The headers that cross the proxy, and the engine's answer relayed to the client.

An answer is passed through as raw bytes, chunk by chunk (no decoding, no buffering), so
streams reach the client as the engine produces them (a small answer that is already
complete leaves in one write, from the pipeline).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable

from flexinfer_common.http1.downstream import Downstream, Headers
from flexinfer_common.web import openai_error_body
from flexinfer_proxy.core.errors import BadRequestError
from flexinfer_proxy.transport.base import AnswerBrokenError, UpstreamAnswer

log = logging.getLogger(__name__)

_HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"trailers",
        b"transfer-encoding",
        b"upgrade",
    }
)
FirstEvent = Callable[[], None]
"""Told once when a relayed event stream's first whole event has been sent."""
_CONTROL = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")
"""Control characters but HTAB, which a field value may hold (RFC 9110 5.5)."""
_DROP_REQUEST = _HOP_BY_HOP | {b"host", b"content-length", b"expect"}
"""Request headers of the client's hop to us; the transport sets its own."""
_DROP_REQUEST_AUTH = _DROP_REQUEST | {b"authorization"}
_DROP_RESPONSE = _HOP_BY_HOP | {b"date", b"server", b"content-length"}
"""The server adds its own date and server headers and frames the body itself."""
SSE_HEADERS: Headers = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]


def _connection_tokens(headers: Headers) -> set[bytes]:
    """Header names the sender listed in Connection: hop-by-hop for this hop only."""
    tokens: set[bytes] = set()
    for name, value in headers:
        if name.lower() == b"connection":
            tokens |= {t.strip().lower() for t in value.split(b",")}
    return tokens


def request_headers(ds: Downstream, *, drop_authorization: bool) -> Headers:
    """The client's end-to-end headers (names lowercase already), to send to the engine.

    ``drop_authorization``: the proxy checked the client's token, which is ours and not
    the engine's to see. A header with a control character is a BadRequestError: our
    server's parser refuses those already (``ds.headers_checked``), but not every ASGI
    server does, and nothing is forwarded that was not checked.
    """
    headers = ds.headers
    if not ds.headers_checked:
        for name, value in headers:
            if _CONTROL.search(value) or _CONTROL.search(name):
                raise BadRequestError("a request header has a control character")
    drop = _DROP_REQUEST_AUTH if drop_authorization else _DROP_REQUEST
    if ds.header(b"connection") is not None:
        drop = drop | _connection_tokens(headers)
    return [(k, v) for k, v in headers if k not in drop]


def response_headers(answer: UpstreamAnswer) -> Headers:
    """The engine's end-to-end headers (names lowercase), to send to the client."""
    drop = _DROP_RESPONSE
    if answer.header(b"connection") is not None:
        drop = drop | _connection_tokens(answer.headers)
    return [(k, v) for k, v in answer.headers if k not in drop]


def is_event_stream(answer: UpstreamAnswer) -> bool:
    """Whether the engine answers with server-sent events."""
    return (answer.header(b"content-type") or b"").startswith(b"text/event-stream")


def sse_comment(text: str) -> bytes:
    """An SSE comment line (readers, the openai SDK included, skip them)."""
    return b": " + text.encode() + b"\n\n"


def sse_data(payload: bytes) -> bytes:
    """One SSE event; a multi-line payload becomes several data: lines."""
    lines = payload.strip().split(b"\n")
    return b"".join(b"data: " + line.rstrip(b"\r") + b"\n" for line in lines) + b"\n"


def sse_error(status: int, message: str, code: str) -> bytes:
    """An SSE event carrying an OpenAI error, so stream readers stop with an error."""
    return sse_data(json.dumps(openai_error_body(status, message, code=code)).encode())


async def relay_stream(
    answer: UpstreamAnswer, ds: Downstream, first_event: FirstEvent | None = None
) -> None:
    """Send ``answer`` to the client as its body arrives (head first); ``first_event`` is
    called once the first whole server-sent event is sent, if the answer is an event stream."""
    await ds.start(answer.status, response_headers(answer))
    await relay_body(answer, ds, event_stream=is_event_stream(answer), first_event=first_event)


async def relay_body(
    answer: UpstreamAnswer,
    ds: Downstream,
    *,
    event_stream: bool,
    first_event: FirstEvent | None = None,
) -> None:
    """Stream the body; a break ends an event stream with an error event, else cuts it."""
    if event_stream:
        await _relay_events(answer, ds, first_event)
        return
    try:
        async for chunk in answer.stream():
            await ds.send(chunk)
    except AnswerBrokenError as exc:
        log.warning("%s", exc)
        ds.abort()  # a cut body must not look complete to the client
        return
    await ds.end()


_EVENT_ENDS = (b"\n\n", b"\r\n\r\n", b"\r\r")
"""An SSE event ends with an empty line, in any of the three line endings."""


def event_end(data: bytes) -> int:
    """Where the last complete server-sent event in ``data`` ends (0: none is complete)."""
    ends = [found + len(mark) for mark in _EVENT_ENDS if (found := data.rfind(mark)) >= 0]
    return max(ends, default=0)


async def _relay_events(
    answer: UpstreamAnswer, ds: Downstream, first_event: FirstEvent | None
) -> None:
    """Relay whole events only: an event the engine broke off inside is dropped, and the
    stream ends with an error event a reader can parse (never half an event and then it)."""
    pending = b""
    try:
        async for chunk in answer.stream():
            data = pending + chunk if pending else chunk
            end = event_end(data)
            pending = data[end:]
            if end:
                await ds.send(data[:end])
                if first_event is not None:
                    first_event()
                    first_event = None
    except AnswerBrokenError as exc:
        log.warning("%s", exc)
        error = sse_error(502, f"the model server failed mid-stream: {exc}", "upstream_error")
        await ds.send(error)
    else:
        if pending:
            await ds.send(pending)  # the engine's own last bytes, as it sent them
    await ds.end()


async def relay_as_event(
    answer: UpstreamAnswer, ds: Downstream, streamed: bool, first_event: FirstEvent | None = None
) -> None:
    """Relay inside an SSE answer already started (a client that waited with progress).

    A streamed answer (``streamed``, status 200) continues the stream as it is; any other
    answer becomes one ``data:`` event holding its JSON (an error's, made OpenAI-shaped).
    """
    if streamed and answer.status == 200:
        await relay_body(answer, ds, event_stream=True, first_event=first_event)
        return
    try:
        payload = await answer.read()
    except AnswerBrokenError as exc:
        await ds.send(sse_error(502, f"the model server failed: {exc}", "upstream_error"))
        await ds.end()
        return
    if answer.status != 200 and not payload.lstrip().startswith(b"{"):
        message = payload[:4096].decode("utf-8", "replace")
        payload = json.dumps(openai_error_body(answer.status, message)).encode()
    await ds.send(sse_data(payload))
    await ds.end()
