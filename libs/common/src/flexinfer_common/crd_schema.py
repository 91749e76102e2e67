"""Pydantic JSON schema -> the structural OpenAPI v3 schema a CRD carries.

The Kubernetes API server accepts only *structural* schemas: no ``$ref``, no ``anyOf`` with
``null``, no ``const``, every node typed. This module rewrites what pydantic produces into
that dialect; :mod:`flexinfer_common.crd` wraps the result in a CustomResourceDefinition.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from pydantic import BaseModel, TypeAdapter

from flexinfer_common.api.duration import Duration, format_duration

JSONSchema = dict[str, Any]

# JSON-schema keywords the Kubernetes OpenAPI v3 dialect keeps as they are.
_KEPT = (
    "description",
    "type",
    "format",
    "enum",
    "default",
    "pattern",
    "minLength",
    "maxLength",
    "minimum",
    "maximum",
    "minItems",
    "maxItems",
    "uniqueItems",
    "required",
    "multipleOf",
)

_TIMEDELTA: TypeAdapter[timedelta] = TypeAdapter(timedelta)
# The pattern the Duration type declares: how a duration field is recognised in the schema.
DURATION_PATTERN: str = TypeAdapter(Duration).json_schema()["pattern"]

# Fields whose content belongs to the backend: stored as written, never pruned.
_FREE_FORM = frozenset({"spec.config", "spec.quantize"})


class CRDSchemaError(ValueError):
    """The pydantic schema has a construct that has no structural OpenAPI equivalent."""


class _Converter:
    """Rewrites one pydantic JSON schema into a structural OpenAPI v3 schema."""

    def __init__(self, defs: Mapping[str, JSONSchema]) -> None:
        self._defs = defs

    def convert(self, node: JSONSchema, path: str) -> JSONSchema:
        """The structural form of ``node``, found at dotted ``path`` in the object."""
        if path in _FREE_FORM:
            return self._free_form(node)
        node = self._resolve(node)
        node = self._drop_null(node, path)
        if "const" in node:
            node = {**{k: v for k, v in node.items() if k != "const"}, "enum": [node["const"]]}
        out: JSONSchema = {k: node[k] for k in _KEPT if k in node}
        if "description" in out:
            out["description"] = " ".join(str(out["description"]).split())
        if "default" in out:
            self._fix_default(out)
        if "exclusiveMinimum" in node:
            out["minimum"], out["exclusiveMinimum"] = node["exclusiveMinimum"], True
        if "exclusiveMaximum" in node:
            out["maximum"], out["exclusiveMaximum"] = node["exclusiveMaximum"], True
        if node.get("x-kubernetes-int-or-string"):
            out["x-kubernetes-int-or-string"] = True
        if "items" in node:
            out["items"] = self.convert(node["items"], f"{path}[]")
        if "properties" in node:
            out["properties"] = {
                name: self.convert(sub, f"{path}.{name}" if path else name)
                for name, sub in node["properties"].items()
            }
            if node.get("additionalProperties") is True:
                # A type that keeps fields it does not declare (extra="allow").
                out["x-kubernetes-preserve-unknown-fields"] = True
        elif node.get("type") == "object":
            self._map_values(node, out, path)
        if "type" not in out and not out.get("x-kubernetes-int-or-string"):
            raise CRDSchemaError(f"{path or '<root>'}: no type in {sorted(node)}")
        return out

    @staticmethod
    def _fix_default(out: JSONSchema) -> None:
        """Drop null defaults; write duration defaults the way manifests do ("5m0s")."""
        value = out["default"]
        if value is None:
            del out["default"]
        elif out.get("pattern") == DURATION_PATTERN and isinstance(value, str):
            # Validation-mode schemas encode timedelta defaults as ISO 8601 ("PT5M").
            out["default"] = format_duration(_TIMEDELTA.validate_python(value))

    def _map_values(self, node: JSONSchema, out: JSONSchema, path: str) -> None:
        """An object without properties: a typed map, or free-form content."""
        extra = node.get("additionalProperties", True)
        if extra is True or extra == {}:
            out["x-kubernetes-preserve-unknown-fields"] = True
        elif isinstance(extra, dict):
            out["additionalProperties"] = self.convert(extra, f"{path}{{}}")

    def _free_form(self, node: JSONSchema) -> JSONSchema:
        out: JSONSchema = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        if "description" in node:
            out["description"] = " ".join(str(node["description"]).split())
        return out

    def _resolve(self, node: JSONSchema) -> JSONSchema:
        """Inline a ``$ref``; keywords beside it (default, description) win over the target's."""
        ref = node.get("$ref")
        if ref is None:
            return node
        name = ref.rsplit("/", 1)[-1]
        if name not in self._defs:
            raise CRDSchemaError(f"unresolved reference {ref}")
        target = self._resolve(self._defs[name])
        return {**target, **{k: v for k, v in node.items() if k != "$ref"}}

    def _drop_null(self, node: JSONSchema, path: str) -> JSONSchema:
        """``X | None`` becomes plain X; ``int | str`` becomes int-or-string."""
        options = node.get("anyOf") or node.get("oneOf")
        if options is None:
            return node
        rest = {k: v for k, v in node.items() if k not in ("anyOf", "oneOf")}
        branches = [self._resolve(b) for b in options if b.get("type") != "null"]
        if len(branches) == 1:
            merged = {**branches[0], **rest}
            return self._drop_null(merged, path)
        types = {b.get("type") for b in branches}
        if types <= {"integer", "number", "string"} and "string" in types:
            # A resource.Quantity: Kubernetes spells it int-or-string.
            return {**rest, "x-kubernetes-int-or-string": True}
        raise CRDSchemaError(f"{path}: a union of {sorted(map(str, types))} is not structural")


def structural_schema(model: type[BaseModel]) -> JSONSchema:
    """The structural OpenAPI v3 schema of a top-level kind (apiVersion/kind/metadata/...)."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    converter = _Converter(raw.get("$defs", {}))
    out: JSONSchema = {"type": "object", "properties": {}}
    if "description" in raw:
        out["description"] = " ".join(raw["description"].split())
    for name, sub in raw["properties"].items():
        if name in ("apiVersion", "kind"):
            out["properties"][name] = {"type": "string"}
        elif name == "metadata":
            # The API server owns ObjectMeta's schema; a CRD may only say it is an object.
            out["properties"][name] = {"type": "object"}
        else:
            out["properties"][name] = converter.convert(sub, name)
    required = [r for r in raw.get("required", []) if r not in ("apiVersion", "kind", "metadata")]
    if required:
        out["required"] = required
    return out
