"""Defaulting and pruning as the Kubernetes API server applies them from a structural schema.

On create and update the API server drops ``null`` from fields that are not nullable, then
fills every absent field that declares a ``default``, walking into present objects, array
items and map values (and into the defaults it just filled). A parent that is absent stays
absent: defaults apply only inside objects that exist. Fields the schema does not declare
are pruned (pruned_fields lists them). Tests and local stores use this to
see an object as a cluster would store it.
"""

from __future__ import annotations

import copy
from typing import Any

from flexinfer_common.crd_schema import JSONSchema


def apply_defaults(doc: Any, schema: JSONSchema) -> Any:
    """``doc`` with the schema's defaults filled in (a new value; ``doc`` is not changed)."""
    return _default(copy.deepcopy(doc), schema)


def _default(value: Any, schema: JSONSchema) -> Any:
    if isinstance(value, list):
        items = schema.get("items")
        return [_default(v, items) for v in value] if isinstance(items, dict) else value
    if not isinstance(value, dict):
        return value
    props: dict[str, JSONSchema] = schema.get("properties", {})
    for name, sub in props.items():
        if value.get(name, ...) is None and not sub.get("nullable"):
            del value[name]
        if name not in value and "default" in sub:
            value[name] = copy.deepcopy(sub["default"])
    extra = schema.get("additionalProperties")
    for name, item in value.items():
        if name in props:
            value[name] = _default(item, props[name])
        elif isinstance(extra, dict):
            value[name] = _default(item, extra)
    return value


def pruned_fields(doc: Any, schema: JSONSchema, path: str = "") -> list[str]:
    """Paths in ``doc`` the API server would silently prune: fields the schema does not declare."""
    if not isinstance(schema, dict) or schema.get("x-kubernetes-preserve-unknown-fields"):
        return []
    if isinstance(doc, list):
        items = schema.get("items", {})
        return [u for i, v in enumerate(doc) for u in pruned_fields(v, items, f"{path}[{i}]")]
    if not isinstance(doc, dict):
        return []
    props: dict[str, JSONSchema] | None = schema.get("properties")
    if props is None:
        extra = schema.get("additionalProperties", {})
        return [u for k, v in doc.items() for u in pruned_fields(v, extra, f"{path}.{k}")]
    out = [f"{path}.{k}" for k in doc if k not in props]
    for key, value in doc.items():
        if key in props:
            out += pruned_fields(value, props[key], f"{path}.{key}")
    return out
