"""Pieces every FastAPI app shares: health routes and OpenAI-shaped error bodies."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from flexinfer_common.errors import FlexInferError, TemporaryError, http_status

ReadyCheck = Callable[[], Awaitable[bool]]

_OPENAI_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    409: "conflict_error",
    413: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
}


def openai_error_body(
    status: int, message: str, *, code: str | None = None, param: str | None = None
) -> dict[str, Any]:
    """The JSON body OpenAI's API answers errors with."""
    kind = _OPENAI_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def openai_error(
    status: int,
    message: str,
    *,
    code: str | None = None,
    param: str | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    """A JSONResponse carrying an OpenAI-shaped error."""
    body = openai_error_body(status, message, code=code, param=param)
    return JSONResponse(body, status_code=status, headers=headers)


def health_router(ready: ReadyCheck | None = None) -> APIRouter:
    """/healthz (the process answers) and /readyz (``ready()`` says it can serve)."""
    router = APIRouter()

    @router.get("/healthz", include_in_schema=False)
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @router.get("/readyz", include_in_schema=False)
    async def readyz() -> JSONResponse:
        ok = True if ready is None else await ready()
        return JSONResponse({"status": "ok" if ok else "not ready"}, status_code=200 if ok else 503)

    return router


def install_error_handlers(app: FastAPI) -> None:
    """Answer FlexInferError and validation errors with OpenAI-shaped JSON."""

    async def on_flexinfer_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, FlexInferError)
        status = http_status(exc)
        headers = None
        if isinstance(exc, TemporaryError):
            headers = {"Retry-After": str(max(1, round(exc.delay)))}
        return openai_error(status, str(exc), code=type(exc).__name__, headers=headers)

    async def on_validation_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
        message = f"{where}: {first.get('msg', 'invalid request')}" if where else "invalid request"
        return openai_error(400, message, param=where or None, code="invalid_request")

    app.add_exception_handler(FlexInferError, on_flexinfer_error)
    app.add_exception_handler(RequestValidationError, on_validation_error)
