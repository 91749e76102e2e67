"""Cold-start progress for clients that wait: SSE comment lines while the model starts.

A streaming request (``"stream": true``) for a model with no ready endpoint gets its
``200 text/event-stream`` answer at once, then a comment line per phase change (and every
``progress_interval_s``)::

    : flexinfer cold-start phase=loading-weights eta=4s waited=3s

SSE readers, the openai SDK included, ignore comment lines. Once an endpoint is ready the
engine's stream follows; a failure ends the stream with an OpenAI error event.

A non-streaming request may opt in with ``X-Flexinfer-Progress: true``. When it must
wait, its answer becomes ``text/event-stream`` too: the same comment lines, then one
``data:`` event holding the engine's JSON response, then the stream ends (an error is a
``data:`` event holding the OpenAI error object). A request that need not wait gets the
plain JSON answer, header or not.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from starlette.types import Scope, Send

from flexinfer_common.errors import FlexInferError
from flexinfer_common.web import openai_error_body
from flexinfer_proxy.core.catalog import Target
from flexinfer_proxy.core.progress import ProgressBoard
from flexinfer_proxy.core.routing.base import RouteContext
from flexinfer_proxy.error_answers import http_status_of
from flexinfer_proxy.extract_http import IncomingRequest
from flexinfer_proxy.forward import relay
from flexinfer_proxy.settings import ProxySettings
from flexinfer_proxy.upstream import UpstreamReadError, UpstreamResponse

if TYPE_CHECKING:
    from flexinfer_proxy.handler import OpenAIProxy

BodySender = Callable[..., Awaitable[None]]

PROGRESS_HEADER = b"x-flexinfer-progress"
_TRUE = (b"1", b"true", b"yes")
_MAX_ERROR_BODY = 64 * 1024
_SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]


def wants_progress(scope: Scope, request: IncomingRequest, settings: ProxySettings) -> bool:
    """Whether a waiting request should get progress lines."""
    if request.stream:
        return settings.progress_sse
    for key, value in scope["headers"]:
        if key == PROGRESS_HEADER:
            return value.strip().lower() in _TRUE
    return False


def _comment(text: str) -> bytes:
    return b": " + text.encode() + b"\n\n"


def _data(payload: bytes) -> bytes:
    # Multi-line payloads become several data: lines (SSE joins them with newlines).
    lines = payload.strip().split(b"\n")
    return b"".join(b"data: " + line.rstrip(b"\r") + b"\n" for line in lines) + b"\n"


def _error(status: int, message: str, code: str) -> bytes:
    body = openai_error_body(status, message, code=code)
    return _data(json.dumps(body).encode())


async def serve_with_progress(
    proxy: OpenAIProxy,
    scope: Scope,
    send: Send,
    target: Target,
    request: IncomingRequest,
    ctx: RouteContext,
    started: float,
) -> bool:
    """Serve a waiting request with progress lines; False (nothing sent) if the queue is full."""
    core = proxy.core
    key = target.model.key
    if core.queue.depth(key) >= core.settings.max_queue_size:
        return False
    await send({"type": "http.response.start", "status": 200, "headers": _SSE_HEADERS})

    async def body(chunk: bytes, more: bool = True) -> None:
        await send({"type": "http.response.body", "body": chunk, "more_body": more})

    connecting = asyncio.ensure_future(proxy.connect(scope, target, request, ctx, started))
    try:
        await _report_until(core.progress, key, connecting, body, started, core.settings)
        try:
            response, url = connecting.result()
        except FlexInferError as exc:
            status = http_status_of(exc)
            core.metrics.requests.count(key, status)
            code = getattr(exc, "code", None) or type(exc).__name__
            await body(_error(status, str(exc), code), False)
            return True
    finally:
        if not connecting.done():
            connecting.cancel()
            with contextlib.suppress(asyncio.CancelledError, FlexInferError):
                await connecting
    await body(
        _comment(f"flexinfer cold-start phase=ready waited={time.monotonic() - started:.0f}s")
    )
    core.metrics.requests.count(key, response.status_code)
    try:
        await _relay_answer(response, request, body, send)
    finally:
        core.loads.end(url)
    return True


async def _report_until(
    board: ProgressBoard,
    key: str,
    connecting: asyncio.Future[tuple[UpstreamResponse, str]],
    body: BodySender,
    started: float,
    settings: ProxySettings,
) -> None:
    """Send a progress comment now, on every phase change, and every interval."""
    while not connecting.done():
        await body(_comment(board.describe(key, time.monotonic() - started)))
        change: asyncio.Future[bool] = asyncio.ensure_future(
            board.wait_change(key, settings.progress_interval_s)
        )
        try:
            pending: set[asyncio.Future[Any]] = {connecting, change}
            await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        finally:
            change.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await change


async def _relay_answer(
    response: UpstreamResponse, request: IncomingRequest, body: BodySender, send: Send
) -> None:
    """The engine's answer inside the already started SSE stream."""
    if response.status_code == 200 and request.stream:
        await relay(response, send, started=True)
        return
    try:
        chunks: list[bytes] = []
        size = 0
        async for chunk in response.aiter_raw():
            size += len(chunk)
            if size > (_MAX_ERROR_BODY if response.status_code != 200 else 1 << 30):
                break
            chunks.append(chunk)
    except (UpstreamReadError, TimeoutError) as exc:
        await body(_error(502, f"the model server failed: {exc!r}", "upstream_error"), False)
        return
    finally:
        await response.aclose()
    payload = b"".join(chunks)
    if response.status_code != 200 and not payload.lstrip().startswith(b"{"):
        payload = json.dumps(
            openai_error_body(response.status_code, payload.decode("utf-8", "replace"))
        ).encode()
    await body(_data(payload), False)
