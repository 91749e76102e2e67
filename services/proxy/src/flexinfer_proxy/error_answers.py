"""Which HTTP status and OpenAI-shaped answer each proxy error gets."""

from __future__ import annotations

from starlette.responses import Response

from flexinfer_common.errors import FlexInferError, TemporaryError, http_status
from flexinfer_common.web import openai_error
from flexinfer_proxy.body_stream import BodyTimeoutError, BodyTooLargeError
from flexinfer_proxy.core.auth import AuthError, ForbiddenError
from flexinfer_proxy.core.errors import BadRequestError, ModelNotFoundError
from flexinfer_proxy.core.ratelimit import RateLimitedError
from flexinfer_proxy.forward import UpstreamError

_STATUS: tuple[tuple[type[Exception], int], ...] = (
    (BadRequestError, 400),
    (AuthError, 401),
    (ForbiddenError, 403),
    (BodyTimeoutError, 408),
    (BodyTooLargeError, 413),
    (RateLimitedError, 429),
    (UpstreamError, 502),
)


def http_status_of(exc: FlexInferError) -> int:
    """The status ``error_response`` answers ``exc`` with."""
    for kind, status in _STATUS:
        if isinstance(exc, kind):
            return status
    return http_status(exc)


def error_response(exc: FlexInferError) -> Response:
    """The OpenAI-shaped answer for ``exc``."""
    status = http_status_of(exc)
    if isinstance(exc, BadRequestError):
        return openai_error(400, str(exc), code="invalid_request", param=exc.field)
    code = getattr(exc, "code", None) or type(exc).__name__
    headers = None
    if isinstance(exc, TemporaryError):
        headers = {"Retry-After": str(max(1, round(exc.delay)))}
    elif isinstance(exc, RateLimitedError):
        headers = {"Retry-After": str(max(1, round(exc.retry_after)))}
    elif isinstance(exc, AuthError):
        headers = {"WWW-Authenticate": "Bearer"}
    param = "model" if isinstance(exc, ModelNotFoundError) else None
    return openai_error(status, str(exc), code=code, param=param, headers=headers)
