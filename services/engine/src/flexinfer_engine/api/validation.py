"""OpenAI's 400s for bodies the engine cannot take: no JSON Content-Type, malformed JSON,
a member of the wrong type or range, a member OpenAI does not define.

OpenAI names the offending member in ``param`` as a path (``messages[0].content``).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute

from flexinfer_common.web import openai_error

_SEND_JSON = "send the body as JSON with Content-Type: application/json"


def content_type_refusal(value: str | None) -> str | None:
    """Why a body with this Content-Type header is refused, or None for JSON."""
    if value is None or not value.strip():
        return f"The request has no Content-Type header: {_SEND_JSON}."
    media = value.split(";", 1)[0].strip().lower()
    kind, _, subtype = media.partition("/")
    if kind == "application" and (subtype == "json" or subtype.endswith("+json")):
        return None
    return f"Content-Type {media!r} is not supported: {_SEND_JSON}."


class JsonRoute(APIRoute):
    """A route whose POST body must be declared JSON: checked before the body is read."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        """FastAPI's handler behind the Content-Type check."""
        handler = super().get_route_handler()

        async def checked(request: Request) -> Response:
            refusal = None
            if request.method == "POST":
                refusal = content_type_refusal(request.headers.get("content-type"))
            if refusal is not None:
                return openai_error(400, refusal, code="invalid_request")
            return await handler(request)

        return checked


def _child(node: Any, item: int | str) -> tuple[bool, Any]:
    if isinstance(item, int) and isinstance(node, list) and 0 <= item < len(node):
        return True, node[item]
    if isinstance(item, str) and isinstance(node, dict) and item in node:
        return True, node[item]
    return False, None


def _step(path: str, item: int | str) -> str:
    if isinstance(item, int):
        return f"{path}[{item}]"
    return f"{path}.{item}" if path else item


def param_path(loc: Sequence[int | str], body: Any, value: Any) -> str | None:
    """OpenAI's ``param`` (``messages[0].content``) for the pydantic location ``loc`` of
    ``value`` in ``body``; None if the location does not lead there.

    Pydantic's locations also name union members ("str", or a tag such as "user" or
    "text", which may equal a real key), so the location is followed through the body:
    each step is a key or index taken, or a member's name passed over, and the path is
    the one that arrives at the value the error is about.
    """

    def walk(index: int, node: Any, path: str) -> str | None:
        if index == len(loc):
            return path if node == value else None
        found, child = _child(node, loc[index])
        if found:
            taken = walk(index + 1, child, _step(path, loc[index]))
            if taken is not None:
                return taken
        return walk(index + 1, node, path)

    return walk(0, body, "")


def _pick(errors: Sequence[Any]) -> dict[str, Any]:
    """The error to report: of the first member that failed, the deepest one (a union
    member that matched the value's shape gets furthest)."""
    first = errors[0]["loc"][:2]
    same = [e for e in errors if e["loc"][:2] == first]
    return dict(max(same, key=lambda e: len(e["loc"])))


def describe(error: dict[str, Any], body: Any) -> tuple[str, str | None, str]:
    """Message, param and code of one pydantic error of a request body."""
    kind, msg = error["type"], error.get("msg", "invalid value")
    loc = [item for item in error["loc"] if item != "body"]
    if kind == "json_invalid":
        return f"We could not parse the JSON body of your request: {msg}.", None, "invalid_request"
    if not loc:
        what = "is empty" if kind == "missing" else "must be a JSON object"
        return f"The request body {what}.", None, "invalid_request"
    named = kind in ("missing", "union_tag_invalid", "union_tag_not_found")
    where = loc[:-1] if kind == "missing" else loc
    param = param_path(where, body, error.get("input"))
    if param is None:  # not expected: pydantic's location, as it is
        param = ".".join(str(item) for item in where)
    if kind == "missing":
        param = _step(param, loc[-1])
    elif named:
        param = _step(param, str(error.get("ctx", {}).get("discriminator", "")).strip("'"))
    if kind == "extra_forbidden":
        return f"Unrecognized request argument supplied: {param}", param, "unknown_parameter"
    if kind != "union_tag_invalid" and named:
        return f"Missing required parameter: '{param}'.", param, "invalid_request"
    return f"Invalid value for '{param}': {msg}.", param, "invalid_request"


def install_request_errors(app: FastAPI) -> None:
    """Answer request body validation errors as OpenAI does."""

    async def on_validation_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        errors = exc.errors()
        if not errors:
            return openai_error(400, "invalid request", code="invalid_request")
        message, param, code = describe(_pick(errors), exc.body)
        return openai_error(400, message, param=param, code=code)

    app.add_exception_handler(RequestValidationError, on_validation_error)
