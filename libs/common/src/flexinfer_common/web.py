"""Pieces every FastAPI app shares: health routes and OpenAI-shaped error bodies."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from http import HTTPStatus
from typing import Any, Literal

from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import iter_route_contexts
from pydantic import BaseModel, ConfigDict
from starlette.exceptions import HTTPException
from starlette.routing import Match

from flexinfer_common.errors import FlexInferError, TemporaryError, http_status

ReadyCheck = Callable[[], Awaitable[bool]]

_OPENAI_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "invalid_request_error",  # OpenAI types an unknown model or URL so, too
    409: "conflict_error",
    413: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
}


class ErrorDetail(BaseModel):
    """The ``error`` object of an OpenAI-shaped error body."""

    message: str
    type: str
    param: str | None
    code: str | None


class ErrorBody(BaseModel):
    """What every FlexInfer HTTP API answers errors with (OpenAI's shape)."""

    error: ErrorDetail


class HealthStatus(BaseModel):
    """The body of /healthz and /readyz; a service may add its own fields to /healthz."""

    model_config = ConfigDict(extra="allow")

    status: Literal["ok", "not ready"]


_RETRY_AFTER = {"Retry-After": {"description": "seconds to wait", "schema": {"type": "string"}}}


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses=`` entries for these error statuses, each an ``ErrorBody``."""
    out: dict[int | str, dict[str, Any]] = {}
    for status in statuses:
        entry: dict[str, Any] = {"model": ErrorBody, "description": HTTPStatus(status).phrase}
        if status == 503:
            entry["headers"] = _RETRY_AFTER
        out[status] = entry
    return out


ERROR_REF = "#/components/schemas/ErrorBody"


def add_error_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """Put ``ErrorBody`` into an OpenAPI document's components; the JSON content to cite it."""
    schemas = schema.setdefault("components", {}).setdefault("schemas", {})
    if "ErrorBody" not in schemas:
        body = ErrorBody.model_json_schema(ref_template="#/components/schemas/{model}")
        schemas.update(body.pop("$defs", {}))
        schemas["ErrorBody"] = body
    return {"application/json": {"schema": {"$ref": ERROR_REF}}}


def _document_400_not_422(app: FastAPI) -> None:
    """FastAPI documents request validation failures as 422; ``install_error_handlers``
    answers them 400 with an ErrorBody, so the document says that instead."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        schema = generate()
        content = add_error_schema(schema)
        for item in schema.get("paths", {}).values():
            for operation in item.values():
                responses = operation.get("responses", {})
                default = responses.get("422", {}).get("content", {}).get("application/json", {})
                if default.get("schema", {}).get("$ref", "").endswith("/HTTPValidationError"):
                    del responses["422"]
                    responses.setdefault("400", {"description": "Bad Request", "content": content})
        schemas = schema["components"]["schemas"]
        for unused in ("HTTPValidationError", "ValidationError"):
            schemas.pop(unused, None)
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


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


def health_router(
    ready: ReadyCheck | None = None, details: Callable[[], dict[str, Any]] | None = None
) -> APIRouter:
    """/healthz (the process answers, with ``details()`` added) and /readyz (``ready()``
    says it can serve)."""
    router = APIRouter(tags=["health"])

    @router.get("/healthz")
    async def healthz() -> HealthStatus:
        """200 while the process answers: the liveness probe."""
        return HealthStatus(status="ok", **(details() if details else {}))

    @router.get(
        "/readyz",
        responses={503: {"model": HealthStatus, "description": "not ready to serve yet"}},
    )
    async def readyz() -> JSONResponse:
        """200 once the service can serve, 503 before: the readiness probe."""
        ok = True if ready is None else await ready()
        return JSONResponse({"status": "ok" if ok else "not ready"}, status_code=200 if ok else 503)

    return router


def _allowed_methods(request: Request) -> str:
    """Every method some route serves at this path: Starlette's 405 names only one route's."""
    methods: set[str] = set()
    # FastAPI keeps an included router as one route: its own routes are listed flat here.
    for route in iter_route_contexts(request.app.router.routes):
        match, _ = route.matches(request.scope)
        if match is not Match.NONE:
            methods |= set(getattr(route, "methods", None) or ())
    return ", ".join(sorted(methods))


def flexinfer_error_response(exc: FlexInferError) -> JSONResponse:
    """The answer to a FlexInferError: its HTTP status, OpenAI's error shape, and a
    Retry-After for a TemporaryError (the app's handler, and servers outside ASGI)."""
    status = http_status(exc)
    headers = None
    if isinstance(exc, TemporaryError):
        headers = {"Retry-After": str(max(1, round(exc.delay)))}
    return openai_error(status, str(exc), code=type(exc).__name__, headers=headers)


def install_error_handlers(app: FastAPI) -> None:
    """Answer FlexInferError, validation and routing errors with OpenAI-shaped JSON."""

    async def on_flexinfer_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, FlexInferError)
        return flexinfer_error_response(exc)

    async def on_validation_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
        message = f"{where}: {first.get('msg', 'invalid request')}" if where else "invalid request"
        return openai_error(400, message, param=where or None, code="invalid_request")

    async def on_http_error(request: Request, exc: Exception) -> JSONResponse:
        # Starlette's own 404/405 answer {"detail": ...}; clients parse one shape only.
        assert isinstance(exc, HTTPException)
        phrase = HTTPStatus(exc.status_code).phrase
        message = exc.detail if isinstance(exc.detail, str) and exc.detail else phrase
        if exc.status_code in (404, 405) and message == phrase:
            # Routing's own refusal: say which request, as OpenAI's "Invalid URL" does.
            message = f"Invalid URL ({request.method} {request.url.path}): {phrase.lower()}"
        code = phrase.lower().replace(" ", "_")
        headers = dict(exc.headers) if exc.headers else {}
        if exc.status_code == 405:
            headers["Allow"] = _allowed_methods(request)
        return openai_error(exc.status_code, message, code=code, headers=headers or None)

    app.add_exception_handler(FlexInferError, on_flexinfer_error)
    app.add_exception_handler(RequestValidationError, on_validation_error)
    app.add_exception_handler(HTTPException, on_http_error)
    _document_400_not_422(app)
