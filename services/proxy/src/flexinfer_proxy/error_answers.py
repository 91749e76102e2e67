"""Which HTTP status and OpenAI-shaped answer each proxy error gets, in one table."""

from __future__ import annotations

import json

from starlette.responses import Response

from flexinfer_common.errors import (
    BodyTimeoutError,
    BodyTooLargeError,
    FlexInferError,
    TemporaryError,
    http_status,
)
from flexinfer_common.web import openai_error_body
from flexinfer_proxy.core.auth import AuthError, ForbiddenError
from flexinfer_proxy.core.errors import (
    BadRequestError,
    MethodNotAllowedError,
    ModelNotFoundError,
    UpstreamError,
)
from flexinfer_proxy.core.ratelimit import RateLimitedError

_STATUS: tuple[tuple[type[Exception], int], ...] = (
    (BadRequestError, 400),
    (AuthError, 401),
    (ForbiddenError, 403),
    (MethodNotAllowedError, 405),
    (BodyTimeoutError, 408),
    (BodyTooLargeError, 413),
    (RateLimitedError, 429),
    (UpstreamError, 502),
)

Headers = list[tuple[bytes, bytes]]


def http_status_of(exc: FlexInferError) -> int:
    """The status an error is answered with."""
    for kind, status in _STATUS:
        if isinstance(exc, kind):
            return status
    return http_status(exc)


def error_code(exc: FlexInferError) -> str:
    """The OpenAI ``code`` of an error answer."""
    if isinstance(exc, BadRequestError):
        return "invalid_request"
    return getattr(exc, "code", None) or type(exc).__name__


def error_body(exc: FlexInferError) -> bytes:
    """The OpenAI error object for ``exc`` as JSON (ASCII: any client text stays escaped)."""
    param = exc.field if isinstance(exc, BadRequestError) else None
    if isinstance(exc, ModelNotFoundError):
        param = "model"
    body = openai_error_body(http_status_of(exc), str(exc), code=error_code(exc), param=param)
    return json.dumps(body).encode()


def error_answer(exc: FlexInferError) -> tuple[int, Headers, bytes]:
    """Status, headers and body of the answer for ``exc``."""
    headers: Headers = [(b"content-type", b"application/json")]
    if isinstance(exc, TemporaryError):
        headers.append((b"retry-after", b"%d" % max(1, round(exc.delay))))
    elif isinstance(exc, RateLimitedError):
        headers.append((b"retry-after", b"%d" % max(1, round(exc.retry_after))))
    elif isinstance(exc, AuthError):
        headers.append((b"www-authenticate", b"Bearer"))
    elif isinstance(exc, MethodNotAllowedError):
        headers.append((b"allow", b"POST"))
    return http_status_of(exc), headers, error_body(exc)


def error_response(exc: FlexInferError) -> Response:
    """``error_answer`` as a Starlette response (for the app's own routes)."""
    status, headers, body = error_answer(exc)
    named = {name.decode("latin-1"): value.decode("latin-1") for name, value in headers}
    return Response(body, status_code=status, headers=named)
