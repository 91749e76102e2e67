"""Defaulting as the Kubernetes API server applies it from a structural schema.

On create and update the API server drops ``null`` from fields that are not nullable, then
fills every absent field that declares a ``default``, walking into present objects, array
items and map values (and into the defaults it just filled). A parent that is absent stays
absent: defaults apply only inside objects that exist. Tests and local stores use this to
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
