"""A CRD's structural OpenAPI v3 schema, applied as the apiserver applies it.

On every write of the main resource: unknown fields are pruned (unless
``x-kubernetes-preserve-unknown-fields``), ``default`` values are filled in where the parent
object is present, and the result is validated (jsonschema, after mapping ``nullable`` and
``x-kubernetes-int-or-string`` to plain JSON schema). The only CEL rule understood is the
transition rule ``self == oldSelf`` (immutable fields); other rules are ignored.
"""

from __future__ import annotations

import copy
from typing import Any

import jsonschema

from flexinfer_common.testing.kube_apiserver.errors import invalid

Schema = dict[str, Any]
_TOP_LEVEL = ("apiVersion", "kind", "metadata")
IMMUTABLE_RULE = "self == oldSelf"


def _to_jsonschema(node: Any) -> Any:
    """The structural dialect as plain JSON schema (jsonschema ignores the x- keys)."""
    if isinstance(node, list):
        return [_to_jsonschema(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _to_jsonschema(v) for k, v in node.items() if k != "nullable"}
    if node.get("x-kubernetes-int-or-string"):
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if node.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    return out


def _prune(node: Schema, value: Any) -> Any:
    if isinstance(value, list):
        items = node.get("items")
        return [_prune(items, v) for v in value] if isinstance(items, dict) else value
    if not isinstance(value, dict):
        return value
    props = node.get("properties")
    extra = node.get("additionalProperties")
    if isinstance(extra, dict):
        return {k: _prune(extra, v) for k, v in value.items()}
    if props is None:
        return value  # preserve-unknown-fields, or an untyped free-form object
    keep_unknown = bool(node.get("x-kubernetes-preserve-unknown-fields"))
    return {
        k: _prune(props[k], v) if k in props else v
        for k, v in value.items()
        if k in props or keep_unknown
    }


def _default(node: Schema, value: Any) -> Any:
    if isinstance(value, list):
        items = node.get("items")
        return [_default(items, v) for v in value] if isinstance(items, dict) else value
    if not isinstance(value, dict):
        return value
    extra = node.get("additionalProperties")
    if isinstance(extra, dict):
        return {k: _default(extra, v) for k, v in value.items()}
    out = dict(value)
    for key, prop in (node.get("properties") or {}).items():
        if key not in out and "default" in prop:
            out[key] = copy.deepcopy(prop["default"])
        if key in out:
            out[key] = _default(prop, out[key])
    return out


def _immutable_paths(node: Schema, path: tuple[str, ...]) -> list[tuple[tuple[str, ...], str]]:
    found = []
    for rule in node.get("x-kubernetes-validations") or []:
        if rule.get("rule", "").replace(" ", "") == IMMUTABLE_RULE.replace(" ", ""):
            found.append((path, str(rule.get("message") or "field is immutable")))
    for key, prop in (node.get("properties") or {}).items():
        found.extend(_immutable_paths(prop, (*path, key)))
    return found


def _lookup(obj: Any, path: tuple[str, ...]) -> tuple[bool, Any]:
    for key in path:
        if not isinstance(obj, dict) or key not in obj:
            return False, None
        obj = obj[key]
    return True, obj


class CrdSchema:
    """The openAPIV3Schema of one CRD version: prune, default, validate, immutability."""

    def __init__(self, kind: str, schema: Schema) -> None:
        self.kind = kind
        self.schema = schema
        self._validator = jsonschema.Draft7Validator(_to_jsonschema(schema))
        self._immutable = _immutable_paths(schema, ())

    def admit(self, obj: dict[str, Any], old: dict[str, Any] | None) -> dict[str, Any]:
        """The object as stored: pruned, defaulted, validated (422 ApiError otherwise)."""
        top = {k: obj[k] for k in _TOP_LEVEL if k in obj}
        body = {k: v for k, v in obj.items() if k not in _TOP_LEVEL}
        props = {k: v for k, v in self.schema.get("properties", {}).items() if k not in _TOP_LEVEL}
        shape = {**self.schema, "properties": props}
        admitted = {**top, **_default(shape, _prune(shape, body))}
        name = str(admitted.get("metadata", {}).get("name", ""))
        errors = sorted(self._validator.iter_errors(admitted), key=lambda e: list(e.path))
        if errors:
            first = errors[0]
            where = ".".join(str(p) for p in first.path) or "<root>"
            raise invalid(self.kind, name, f"{where}: {first.message}")
        if old is not None:
            for path, message in self._immutable:
                had, before = _lookup(old, path)
                has, after = _lookup(admitted, path)
                if had and (not has or before != after):
                    raise invalid(self.kind, name, f"{'.'.join(path)}: Invalid value: {message}")
        return admitted
