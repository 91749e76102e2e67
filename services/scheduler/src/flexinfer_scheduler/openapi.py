"""The extender operations' OpenAPI documentation (the handlers read raw JSON for speed and
for Go's case-insensitive field names, so the schemas are written out here)."""

from __future__ import annotations

from typing import Any

from flexinfer_common.web import error_responses


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    """Go decodes null into any map, slice or struct pointer as absent: so does the parser."""
    return {**schema, "type": [schema["type"], "null"]}


_STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
_OPTIONAL_STRING_MAP = _nullable(_STRING_MAP)
_METADATA = {
    "type": "object",
    "properties": {
        "name": {"type": ["string", "null"]},
        "namespace": {"type": ["string", "null"]},
        "labels": _OPTIONAL_STRING_MAP,
        "annotations": _OPTIONAL_STRING_MAP,
    },
}
_NODE_METADATA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1},
        "labels": _OPTIONAL_STRING_MAP,
        "annotations": _OPTIONAL_STRING_MAP,
    },
    "required": ["name"],
}
_NODE = {"type": "object", "properties": {"metadata": _NODE_METADATA}, "required": ["metadata"]}
_NODE_LIST = {
    "type": "object",
    "properties": {"items": _nullable({"type": "array", "items": _NODE})},
}
_QUANTITIES = _nullable({"type": "object", "additionalProperties": {"type": ["string", "number"]}})
_RESOURCES = {"type": "object", "properties": {"limits": _QUANTITIES, "requests": _QUANTITIES}}
_CONTAINER = {"type": "object", "properties": {"resources": _nullable(_RESOURCES)}}
_SPEC = {
    "type": "object",
    "properties": {"containers": _nullable({"type": "array", "items": _CONTAINER})},
}
_POD = {
    "type": "object",
    "properties": {
        "metadata": _nullable(_METADATA),
        "spec": _nullable(_SPEC),
    },
}
EXTENDER_ARGS: dict[str, Any] = {
    "type": "object",
    "description": "k8s.io/kube-scheduler/extender/v1 ExtenderArgs; field names match "
    "case-insensitively (Pod, NodeNames from older configurations); nodes or nodenames "
    "(nodeCacheCapable) is required.",
    "properties": {
        "pod": _POD,
        "nodes": {**_NODE_LIST, "type": ["object", "null"]},
        "nodenames": {"type": ["array", "null"], "items": {"type": "string"}},
    },
    "required": ["pod"],
    # Go decodes null as absent: one of the two must be there and not null.
    "anyOf": [
        {"required": ["nodenames"], "properties": {"nodenames": {"type": "array"}}},
        {"required": ["nodes"], "properties": {"nodes": {"type": "object"}}},
    ],
}
FILTER_RESULT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "nodes": _NODE_LIST,
        "nodenames": {"type": "array", "items": {"type": "string"}},
        "failedNodes": _STRING_MAP,
        "failedAndUnresolvableNodes": _STRING_MAP,
        "error": {"type": "string"},
    },
    "required": ["nodenames", "failedNodes", "failedAndUnresolvableNodes"],
}
HOST_PRIORITY_LIST: dict[str, Any] = {
    "type": "array",
    "items": {
        "type": "object",
        "properties": {
            "host": {"type": "string"},
            "score": {"type": "integer", "minimum": 0, "maximum": 10},
        },
        "required": ["host", "score"],
    },
}


def _operation(
    summary: str, answer: dict[str, Any], description: str, *errors: int
) -> dict[str, Any]:
    return {
        "summary": summary,
        "responses": {
            200: {
                "description": description,
                "content": {"application/json": {"schema": answer}},
            },
            **error_responses(400, *errors),
        },
        "openapi_extra": {
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": EXTENDER_ARGS}},
            }
        },
    }


FILTER = _operation(
    "Filter nodes", FILTER_RESULT, "ExtenderFilterResult: passing nodes, failedNodes reasons"
)
# 503: the apiserver informers have not listed yet (a HostPriorityList has no error field;
# /filter says it in its ExtenderFilterResult's ``error``).
PRIORITIZE = _operation(
    "Prioritize nodes", HOST_PRIORITY_LIST, "HostPriorityList, scores 0..10", 503
)
SCORE = _operation("Prioritize nodes (alias)", HOST_PRIORITY_LIST, "As /prioritize", 503)
