"""The proxied OpenAI routes as a bare ASGI app: no per-request middleware or models.

POST /v1/* reads the body (capped), finds the model, waits for an endpoint if the model
is cold, forwards, and streams the answer back. A client that disconnects cancels
whatever its request is doing: waiting in the queue or streaming from the engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Coroutine
from typing import Any

import httpx
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from flexinfer_common.api import Model
from flexinfer_common.errors import FlexInferError, TemporaryError, http_status
from flexinfer_common.web import openai_error
from flexinfer_proxy.core.body import BadRequestError, ParsedBody, parse_body
from flexinfer_proxy.core.errors import ModelNotFoundError
from flexinfer_proxy.core.service import ProxyCore
from flexinfer_proxy.forward import (
    UpstreamConnectError,
    UpstreamError,
    open_upstream,
    relay,
)

log = logging.getLogger(__name__)


class BodyTooLargeError(FlexInferError):
    """The request body exceeds max_body_bytes."""

    code = "request_too_large"


class ClientGoneError(Exception):
    """The client disconnected before its body was read."""


def error_response(exc: FlexInferError) -> Response:
    """The OpenAI-shaped answer for ``exc``."""
    if isinstance(exc, BadRequestError):
        return openai_error(400, str(exc), code="invalid_request", param=exc.field)
    status = http_status_of(exc)
    code = getattr(exc, "code", None) or type(exc).__name__
    headers = None
    if isinstance(exc, TemporaryError):
        headers = {"Retry-After": str(max(1, round(exc.delay)))}
    param = "model" if isinstance(exc, ModelNotFoundError) else None
    return openai_error(status, str(exc), code=code, param=param, headers=headers)


async def read_body(scope: Scope, receive: Receive, limit: int) -> bytes:
    """The whole request body; BodyTooLargeError as soon as it exceeds ``limit``."""
    for key, value in scope["headers"]:
        if key == b"content-length":
            try:
                declared = int(value)
            except ValueError:
                raise BadRequestError("invalid Content-Length header") from None
            if declared > limit:
                raise BodyTooLargeError(f"request body exceeds {limit} bytes")
    chunks: list[bytes] = []
    total = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGoneError
        chunk = message.get("body", b"")
        total += len(chunk)
        if total > limit:
            raise BodyTooLargeError(f"request body exceeds {limit} bytes")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


async def _watch_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def run_until_disconnect(receive: Receive, work: Coroutine[Any, Any, None]) -> None:
    """Run ``work``; cancel it if the client disconnects first."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_watch_disconnect(receive))
    try:
        await asyncio.wait((task, watcher), return_when=asyncio.FIRST_COMPLETED)
    finally:
        for pending in (watcher, task):
            if not pending.done():
                pending.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await pending
    if task.done() and not task.cancelled():
        task.result()  # re-raise its exception, if any


class OpenAIProxy:
    """ASGI app for POST /v1/*: route to the model's engine, queueing on a cold start."""

    def __init__(self, core: ProxyCore, client: httpx.AsyncClient | None = None) -> None:
        self.core = core
        self.client = client

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Handle one request."""
        started = time.monotonic()
        core = self.core
        try:
            raw = await read_body(scope, receive, core.settings.max_body_bytes)
            parsed = parse_body(raw)
            model = await core.catalog.resolve(parsed.model)
            if model is None:
                raise ModelNotFoundError(parsed.model)
        except ClientGoneError:
            return
        except FlexInferError as exc:
            core.metrics.requests.labels("", str(http_status_of(exc))).inc()
            await error_response(exc)(scope, receive, send)
            return
        key = model.key
        core.activity.begin(key, core.activity_interval(model))
        try:
            await run_until_disconnect(
                receive, self._serve(scope, receive, send, model, parsed, started)
            )
        finally:
            core.activity.end(key)

    async def _serve(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        model: Model,
        parsed: ParsedBody,
        started: float,
    ) -> None:
        core = self.core
        key = model.key
        body = parsed.with_model(model.served_names[0])
        try:
            response = await self._connect(scope, model, body, started)
        except FlexInferError as exc:
            core.metrics.requests.labels(key, str(http_status_of(exc))).inc()
            await error_response(exc)(scope, receive, send)
            return
        core.metrics.requests.labels(key, str(response.status_code)).inc()
        await relay(response, send)

    async def _connect(
        self, scope: Scope, model: Model, body: bytes, started: float
    ) -> httpx.Response:
        """Open the upstream response, retrying other endpoints when connecting fails."""
        core = self.core
        key = model.key
        assert self.client is not None, "the app's lifespan creates the client"
        deadline = started + core.wait_budget(model)
        while True:
            endpoint = core.dispatcher.pick_now(key)
            if endpoint is None:
                endpoint = await core.dispatcher.acquire(
                    key, model.metadata.name, deadline, started
                )
                core.metrics.queue_wait.labels(key).observe(time.monotonic() - started)
            try:
                return await open_upstream(self.client, endpoint.url, scope, body)
            except UpstreamConnectError as exc:
                log.warning("%s: %s; trying another endpoint", key, exc)
                core.metrics.upstream_errors.labels(key, "connect").inc()
                core.dispatcher.endpoint_failed(key, endpoint.url)


def http_status_of(exc: FlexInferError) -> int:
    """The status ``error_response`` answers ``exc`` with."""
    if isinstance(exc, BadRequestError):
        return 400
    if isinstance(exc, BodyTooLargeError):
        return 413
    if isinstance(exc, UpstreamError):
        return 502
    return http_status(exc)
