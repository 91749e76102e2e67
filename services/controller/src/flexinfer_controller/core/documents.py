"""Parse a Model or LoRAAdapter document (JSON or YAML, as the CRD) from an untrusted body."""

from __future__ import annotations

import json
from typing import Any, Literal, TypeVar

import yaml
from pydantic import ValidationError

from flexinfer_common.api import API_VERSION, LORA_KIND, LoRAAdapter, Model
from flexinfer_common.api.meta import ApiModel
from flexinfer_common.errors import ConfigError, InvalidSpecError

Format = Literal["json", "yaml"]
Kind = TypeVar("Kind", bound=ApiModel)

_SERVER_FIELDS = ("uid", "generation", "creationTimestamp", "deletionTimestamp")
"""metadata the store owns: a client may send back what it read, but cannot set them."""


class MalformedDocumentError(ConfigError):
    """The body is not a well-formed API document (maps to HTTP 400)."""


class _NoAliasLoader(yaml.SafeLoader):
    """safe_load without aliases: ``*ref`` expansion is how YAML bombs grow exponentially."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            raise MalformedDocumentError("YAML aliases (*name) are not allowed in a document")
        return super().compose_node(parent, index)


def decode(body: bytes, fmt: Format | None, kind: str = "Model") -> dict[str, Any]:
    """The document as a mapping; ``fmt`` None sniffs JSON (leading '{') or YAML."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MalformedDocumentError(f"body is not UTF-8: {exc}") from exc
    if fmt is None:
        fmt = "json" if text.lstrip().startswith("{") else "yaml"
    try:
        doc = json.loads(text) if fmt == "json" else yaml.load(text, Loader=_NoAliasLoader)
    except (ValueError, yaml.YAMLError) as exc:
        raise MalformedDocumentError(f"malformed {fmt.upper()}: {_first_line(exc)}") from exc
    except RecursionError as exc:
        raise MalformedDocumentError(f"malformed {fmt.upper()}: nested too deeply") from exc
    if not isinstance(doc, dict):
        raise MalformedDocumentError(
            f"a {kind} document must be a mapping, not {type(doc).__name__}"
        )
    return doc


def _first_line(exc: Exception) -> str:
    return " ".join(str(exc).split())[:300]


def parse_model(
    doc: dict[str, Any],
    *,
    namespace: str | None,
    default_namespace: str,
    path_name: str | None = None,
) -> Model:
    """Validate a decoded document into a Model; ``status`` is ignored."""
    return parse_document(
        Model, "Model", doc,
        namespace=namespace, default_namespace=default_namespace, path_name=path_name,
    )  # fmt: skip


def parse_adapter(
    doc: dict[str, Any],
    *,
    namespace: str | None,
    default_namespace: str,
    path_name: str | None = None,
) -> LoRAAdapter:
    """Validate a decoded document into a LoRAAdapter; ``status`` is ignored."""
    return parse_document(
        LoRAAdapter, LORA_KIND, doc,
        namespace=namespace, default_namespace=default_namespace, path_name=path_name,
    )  # fmt: skip


def parse_document(
    type_: type[Kind],
    expected_kind: str,
    doc: dict[str, Any],
    *,
    namespace: str | None,
    default_namespace: str,
    path_name: str | None = None,
) -> Kind:
    """Validate a decoded document of ``expected_kind`` into ``type_``; ``status`` is ignored."""
    api_version, kind = doc.get("apiVersion", API_VERSION), doc.get("kind", expected_kind)
    if api_version != API_VERSION:
        raise MalformedDocumentError(f"apiVersion must be {API_VERSION!r}, not {api_version!r}")
    if kind != expected_kind:
        raise MalformedDocumentError(f"kind must be {expected_kind!r}, not {kind!r}")
    doc = {k: v for k, v in doc.items() if k != "status"}
    meta = doc.get("metadata")
    if isinstance(meta, dict):
        meta = {k: v for k, v in meta.items() if k not in _SERVER_FIELDS}
        doc["metadata"] = meta
        if path_name is not None:
            if "name" not in meta:
                meta["name"] = path_name
            elif meta["name"] != path_name:
                raise MalformedDocumentError(
                    f"metadata.name {meta['name']!r} does not match the name in the path "
                    f"{path_name!r}"
                )
        body_ns = meta.get("namespace")
        if namespace is not None and body_ns is not None and body_ns != namespace:
            raise MalformedDocumentError(
                f"metadata.namespace {body_ns!r} does not match ?namespace={namespace}"
            )
        meta["namespace"] = body_ns if body_ns is not None else (namespace or default_namespace)
    try:
        return type_.model_validate(doc)
    except ValidationError as exc:
        raise _spec_error(exc, expected_kind) from exc


def _spec_error(exc: ValidationError, kind: str) -> InvalidSpecError:
    errors = exc.errors(include_url=False)
    parts = []
    for err in errors[:3]:
        where = ".".join(str(p) for p in err["loc"])
        parts.append(f"{where}: {err['msg']}" if where else err["msg"])
    more = f" (and {len(errors) - 3} more)" if len(errors) > 3 else ""
    first = ".".join(str(p) for p in errors[0]["loc"]) if errors else None
    return InvalidSpecError(f"invalid {kind}: " + "; ".join(parts) + more, field=first or None)
