"""OpenAPI pieces of the admin API: response models, every documented status, request bodies.

The routes read their bodies themselves (JSON or YAML, size-capped, duplicate keys refused),
so FastAPI cannot infer the request schema: ``request_body`` writes it out, inlined, for
both media types. Every status a route can answer is listed with its body model, so a
client (or schemathesis) can hold the API to its document.
"""

from __future__ import annotations

import copy
from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field, create_model

from flexinfer_common.api.meta import ApiModel
from flexinfer_common.web import error_responses
from flexinfer_controller.core.documents import SERVER_FIELDS

_MAX_REF_DEPTH = 32


class EndpointView(ApiModel):
    """One engine replica as the runtime published it."""

    model: str
    """namespace/name of the Model."""
    replica: str
    url: str
    """Base URL of the replica's OpenAI-compatible server, without /v1."""
    ready: bool
    node: str | None
    updated_at: datetime


class EndpointList(ApiModel):
    """GET /v1/admin/endpoints."""

    items: list[EndpointView]


def list_model(kind: str, type_: type[ApiModel]) -> type[BaseModel]:
    """``<kind>List``: apiVersion, kind and the items, as kubectl's lists."""
    items: Any = list[type_]  # type: ignore[valid-type]
    return create_model(
        f"{kind}List",
        __base__=ApiModel,
        api_version=(str, Field(description="ai.flexinfer/v1alpha2")),
        kind=(str, Field(description=f"{kind}List")),
        items=(items, ...),
    )


def document_responses(
    type_: type[BaseModel] | None, successes: dict[int, str], *errors: int
) -> dict[int | str, dict[str, Any]]:
    """``responses=`` for a route: its success statuses (bodies of ``type_``) and its errors."""
    out: dict[int | str, dict[str, Any]] = {}
    for status, description in successes.items():
        out[status] = {"description": description}
        if type_ is not None:
            out[status]["model"] = type_
    out.update(error_responses(*errors))
    return out


EXAMPLES: dict[str, dict[str, Any]] = {
    "Model": {
        "apiVersion": "ai.flexinfer/v1alpha2",
        "kind": "Model",
        "metadata": {"name": "qwen", "labels": {"team": "ml"}},
        "spec": {
            "backend": "vllm",
            "source": "HF://Qwen/Qwen2.5-0.5B-Instruct",
            "serverless": {"minReplicas": 0, "idleTimeout": "5m"},
        },
    },
    "LoRAAdapter": {
        "apiVersion": "ai.flexinfer/v1alpha2",
        "kind": "LoRAAdapter",
        "metadata": {"name": "qwen-sql"},
        "spec": {
            "modelRef": "qwen",
            "adapterName": "qwen-sql",
            "source": {"type": "HuggingFace", "uri": "org/qwen-sql-lora"},
        },
    },
}
"""One document per kind, shown in the OpenAPI (and sent first by schemathesis)."""


def request_body(type_: type[BaseModel]) -> dict[str, Any]:
    """``openapi_extra`` declaring a ``type_`` document body, as JSON or as YAML.

    ``status`` and the store's metadata fields are documented as what they are: accepted
    in any shape (a client may send back what it read) and ignored.
    """
    schema = inline_refs(type_.model_json_schema(by_alias=True, mode="validation"))
    properties = schema.get("properties", {})
    if "status" in properties:
        properties["status"] = {"description": "ignored: the controller owns status"}
    metadata = properties.get("metadata", {}).get("properties", {})
    for name in SERVER_FIELDS:
        if name in metadata:
            metadata[name] = {"description": "ignored: the store sets it"}
    content = {media: {"schema": schema} for media in ("application/json", "application/yaml")}
    return {"requestBody": {"required": True, "content": content}}


def inline_refs(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with every ``#/$defs/...`` reference replaced by its definition."""
    defs = schema.get("$defs", {})
    body = {k: v for k, v in schema.items() if k != "$defs"}
    resolved: dict[str, Any] = _inline(body, defs, 0)
    return resolved


def _inline(node: Any, defs: dict[str, Any], depth: int) -> Any:
    if depth > _MAX_REF_DEPTH:
        raise ValueError("schema references nest too deeply (a recursive type?)")
    if isinstance(node, list):
        return [_inline(item, defs, depth) for item in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        target = copy.deepcopy(defs[ref.removeprefix("#/$defs/")])
        rest = {k: v for k, v in node.items() if k != "$ref"}
        return _inline({**target, **rest}, defs, depth + 1)
    return {key: _inline(value, defs, depth) for key, value in node.items()}
