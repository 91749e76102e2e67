"""Patch formats: JSON merge patch (RFC 7386) and JSON patch (RFC 6902, without move/copy).

Strategic merge patch is applied as a JSON merge patch: lists are replaced whole instead
of merged by their patch keys. Server-side apply is not supported (415).
"""

from __future__ import annotations

import copy
from typing import Any

from flexinfer_common.testing.kube_apiserver.errors import ApiError

MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY = "application/apply-patch+yaml"


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge key by key, ``null`` removes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise ApiError(422, f"invalid JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _parent(doc: Any, parts: list[str]) -> Any:
    node = doc
    for part in parts[:-1]:
        try:
            node = node[int(part)] if isinstance(node, list) else node[part]
        except (KeyError, IndexError, ValueError) as exc:
            raise ApiError(422, f"JSON patch path not found at {part!r}") from exc
    return node


def _apply_op(doc: Any, op: dict[str, Any]) -> Any:
    parts = _pointer(str(op.get("path", "")))
    kind = op.get("op")
    if not parts:
        if kind in ("add", "replace"):
            return copy.deepcopy(op.get("value"))
        raise ApiError(422, f"JSON patch op {kind!r} on the whole document")
    node, last = _parent(doc, parts), parts[-1]
    try:
        if kind == "test":
            current = node[int(last)] if isinstance(node, list) else node[last]
            if current != op.get("value"):
                raise ApiError(422, f"JSON patch test failed at {op['path']}")
        elif kind == "remove":
            del node[int(last) if isinstance(node, list) else last]
        elif kind == "add" and isinstance(node, list):
            index = len(node) if last == "-" else int(last)
            node.insert(index, copy.deepcopy(op.get("value")))
        elif kind in ("add", "replace"):
            if isinstance(node, list):
                node[int(last)] = copy.deepcopy(op.get("value"))
            else:
                if kind == "replace" and last not in node:
                    raise KeyError(last)
                node[last] = copy.deepcopy(op.get("value"))
        else:
            raise ApiError(422, f"JSON patch op {kind!r} is not supported by this fake")
    except (KeyError, IndexError, ValueError, TypeError) as exc:
        raise ApiError(422, f"JSON patch path {op.get('path')!r} not found") from exc
    return doc


def json_patch(target: Any, ops: Any) -> Any:
    """RFC 6902 add/remove/replace/test; a failed op fails the whole patch (422)."""
    if not isinstance(ops, list):
        raise ApiError(400, "a JSON patch must be a list of operations")
    doc = copy.deepcopy(target)
    for op in ops:
        if not isinstance(op, dict):
            raise ApiError(400, "a JSON patch operation must be an object")
        doc = _apply_op(doc, op)
    return doc


def apply_patch(content_type: str, target: dict[str, Any], body: Any) -> dict[str, Any]:
    """The patched object, by the request's Content-Type."""
    if content_type in (MERGE, STRATEGIC):
        if not isinstance(body, dict):
            raise ApiError(400, "a merge patch must be a JSON object")
        result: dict[str, Any] = merge_patch(target, body)
        return result
    if content_type == JSON_PATCH:
        patched = json_patch(target, body)
        if not isinstance(patched, dict):
            raise ApiError(422, "a JSON patch must leave an object")
        return patched
    if content_type == APPLY:
        raise ApiError(415, "server-side apply is not supported by this fake apiserver")
    raise ApiError(415, f"the body of the request was in an unknown format: {content_type}")
