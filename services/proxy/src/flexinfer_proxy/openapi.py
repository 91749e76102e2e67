"""The proxied routes in the proxy's OpenAPI document, written from the one route table.

The pipeline answers those routes before FastAPI sees them, so FastAPI cannot describe them
itself: each route of ``Surface`` is added here, bare and under ``/model/{model}``, with
every status the pipeline can answer and OpenAI's error body for each.
"""

from __future__ import annotations

from collections.abc import Callable
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI

from flexinfer_common.web import add_error_schema
from flexinfer_proxy.core.surface import Surface

_ERRORS = {
    400: "a malformed target, header or body, or no model named",
    401: "no valid client token (when tokens are configured)",
    403: "the token may not use this model",
    404: "no such model, or a route its backend does not serve",
    408: "the body arrived too slowly",
    413: "the body is larger than FLEXINFER_PROXY_MAX_BODY_BYTES",
    429: "a rate limit was reached",
    502: "the engine failed or could not be reached",
    503: "the model is starting (queue full or waited too long) or cannot start",
}
_RETRY = {"Retry-After": {"description": "seconds to wait", "schema": {"type": "string"}}}
_MULTIPART = ("/v1/audio/transcriptions", "/v1/audio/translations", "/v1/images/edits")
_HEADERS = [
    {
        "name": "X-Model-ID",
        "in": "header",
        "required": False,
        "description": "the model, instead of the body's",
        "schema": {"type": "string"},
    },
    {
        "name": "X-Flexinfer-Progress",
        "in": "header",
        "required": False,
        "description": "true: a request that must wait gets cold-start progress as SSE",
        "schema": {"type": "string"},
    },
]


def _body(route: str) -> dict[str, Any]:
    fields = {"model": {"type": "string"}, "stream": {"type": "boolean"}}
    kind = "multipart/form-data" if route in _MULTIPART else "application/json"
    schema = {"type": "object", "properties": fields}
    return {"required": True, "content": {kind: {"schema": schema}}}


def _operation(route: str, error: dict[str, Any], prefixed: bool) -> dict[str, Any]:
    parameters = list(_HEADERS)
    if prefixed:
        model = {"type": "string", "minLength": 1}
        parameters.append({"name": "model", "in": "path", "required": True, "schema": model})
    responses: dict[str, Any] = {
        "200": {
            "description": "the engine's answer, as it sent it",
            "content": {"application/json": {}, "text/event-stream": {}},
        }
    }
    for status, why in _ERRORS.items():
        entry: dict[str, Any] = {"description": f"{HTTPStatus(status).phrase}: {why}"}
        entry["content"] = error
        if status in (429, 503):
            entry["headers"] = _RETRY
        responses[str(status)] = entry
    name = ("model" + route if prefixed else route).strip("/").replace("/", "_")
    return {
        "operationId": f"proxy_{name}",
        "summary": f"Forwarded to the model's engine as POST {route}",
        "tags": ["proxied"],
        "parameters": parameters,
        "requestBody": _body(route),
        "responses": responses,
    }


def document_proxied_routes(app: FastAPI, surface: Surface) -> None:
    """Add every proxied route to ``app``'s OpenAPI document."""
    generate: Callable[[], dict[str, Any]] = app.openapi

    def openapi() -> dict[str, Any]:
        schema = generate()
        paths = schema.setdefault("paths", {})
        if "/v1/chat/completions" not in paths:  # generate() hands out one cached document
            error = add_error_schema(schema)
            for route in sorted(surface.all_routes):
                paths[route] = {"post": _operation(route, error, prefixed=False)}
                paths["/model/{model}" + route] = {"post": _operation(route, error, True)}
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
