"""Parse a Model or LoRAAdapter document (JSON or YAML, as the CRD) from an untrusted body."""

from __future__ import annotations

import json
import math
from typing import Any, Literal, TypeVar

import yaml
from pydantic import ValidationError

from flexinfer_common.api import (
    API_VERSION,
    CATALOG_KIND,
    LORA_KIND,
    LoRAAdapter,
    Model,
    ModelCatalog,
)
from flexinfer_common.api.meta import ApiModel
from flexinfer_common.errors import ConfigError, InvalidSpecError

Format = Literal["json", "yaml"]
Kind = TypeVar("Kind", bound=ApiModel)

SERVER_FIELDS = ("uid", "generation", "creationTimestamp", "deletionTimestamp")
"""metadata the store owns: a client may send back what it read, but cannot set them
(they are dropped, as is ``status``)."""


class MalformedDocumentError(ConfigError):
    """The body is not a well-formed API document (maps to HTTP 400)."""

    def __init__(self, message: str, *, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path
        """Where in the document the problem is (``spec.gpu``), when one place is to blame."""


MAX_DEPTH = 64
"""Deepest nesting a document may have: Model manifests nest under 15 levels, and a bound
keeps hostile inputs from exhausting the parser's recursion."""

MAX_NODES = 10_000
"""Most values (scalars, mappings, lists) a document may hold: a Model has a few hundred.
It bounds the time and memory a hostile body costs: the pure-Python YAML composer spends
about 17 µs and a few hundred bytes per value (bench/fuzz_documents.py)."""

_MERGE_TAG = "tag:yaml.org,2002:merge"


class _StrictLoader(yaml.SafeLoader):
    """safe_load that refuses what kubectl would not keep: aliases, merge keys, duplicates.

    Aliases are refused because ``*ref`` expansion is how YAML bombs grow exponentially.
    """

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._nodes = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        """Compose one node, refusing aliases, deep nesting and too many nodes."""
        event = self.peek_event()  # type: ignore[no-untyped-call]
        line = event.start_mark.line + 1
        if isinstance(event, yaml.AliasEvent):
            raise MalformedDocumentError(
                f"YAML aliases (*name) are not allowed in a document (line {line})"
            )
        self._nodes += 1
        if self._nodes > MAX_NODES:
            raise MalformedDocumentError(f"document holds more than {MAX_NODES} values")
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise MalformedDocumentError(
                    f"document nests deeper than {MAX_DEPTH} levels (line {line})"
                )
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def get_single_data(self) -> Any:
        """The document, after its mapping keys were checked."""
        node = self.get_single_node()
        if node is None:
            return None
        self._check_keys(node)
        return self.construct_document(node)

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        """Build one value, mapping PyYAML's own slips: ``!!timestamp x`` raises
        AttributeError inside it, ``!!binary`` of bad base64 a binascii.Error."""
        try:
            return super().construct_object(node, deep)
        except MalformedDocumentError:
            raise
        except (AttributeError, IndexError, KeyError, TypeError, ValueError, OverflowError) as exc:
            line = node.start_mark.line + 1
            tag = str(node.tag).replace("tag:yaml.org,2002:", "!!")
            raise MalformedDocumentError(
                f"malformed YAML: line {line} is not a valid {tag} ({_first_line(exc)})"
            ) from exc

    def _check_keys(self, root: yaml.Node) -> None:
        """Refuse duplicate, complex and merge keys at every level, naming line and path."""
        stack: list[tuple[yaml.Node, tuple[Any, ...]]] = [(root, ())]
        while stack:
            node, path = stack.pop()
            if isinstance(node, yaml.SequenceNode):
                stack.extend((item, (*path, i)) for i, item in enumerate(node.value))
            elif isinstance(node, yaml.MappingNode):
                stack.extend(self._mapping_children(node, path))

    def _mapping_children(
        self, node: yaml.MappingNode, path: tuple[Any, ...]
    ) -> list[tuple[yaml.Node, tuple[Any, ...]]]:
        seen: dict[Any, int] = {}
        children = []
        for key_node, value_node in node.value:
            line = key_node.start_mark.line + 1
            if key_node.tag == _MERGE_TAG:
                raise MalformedDocumentError(
                    f"YAML merge keys (<<) are not allowed (line {line}, {where(path)})"
                )
            if not isinstance(key_node, yaml.ScalarNode):
                raise MalformedDocumentError(
                    f"mapping keys must be scalars (line {line}, {where(path)})"
                )
            key = self.construct_object(key_node)
            if key in seen:
                raise DuplicateKeyError(key, path, line=line, first_line=seen[key])
            seen[key] = line
            children.append((value_node, (*path, key)))
        return children


class DuplicateKeyError(MalformedDocumentError):
    """A mapping names one key twice: kubectl refuses it, and one value would be lost."""

    def __init__(
        self,
        key: Any,
        path: tuple[Any, ...],
        *,
        line: int | None = None,
        first_line: int | None = None,
    ) -> None:
        lines = f" (line {line}; first at line {first_line})" if line is not None else ""
        message = f"duplicate key {short(key)} {where(path)}{lines}"
        super().__init__(message, path=format_path((*path, key)))


class _Duplicated(dict[str, Any]):
    """A JSON object that named ``duplicate`` twice (found by ``_check_tree``, with its path)."""

    duplicate: str = ""


def _json_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    duplicate = None
    for key, value in pairs:
        if key in obj and duplicate is None:
            duplicate = key
        obj[key] = value
    if duplicate is None:
        return obj
    marked = _Duplicated(obj)
    marked.duplicate = duplicate
    return marked


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a valid JSON number")


def _load(text: str, fmt: Format) -> Any:
    if fmt == "json":
        return json.loads(text, object_pairs_hook=_json_object, parse_constant=_no_constant)
    return yaml.load(text, Loader=_StrictLoader)


def decode(body: bytes, fmt: Format | None, kind: str = "Model") -> dict[str, Any]:
    """The document as a mapping; ``fmt`` None sniffs JSON (leading '{') or YAML.

    Only MalformedDocumentError escapes: for bad UTF-8, bad syntax, duplicate keys,
    aliases, non-finite numbers, nesting deeper than MAX_DEPTH or more than MAX_NODES values.
    """
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MalformedDocumentError(f"body is not UTF-8: {exc}") from exc
    if fmt is None:
        fmt = "json" if text.lstrip().startswith("{") else "yaml"
    try:
        doc = _load(text, fmt)
    except MalformedDocumentError:
        raise
    except (ValueError, TypeError, OverflowError, yaml.YAMLError) as exc:
        raise MalformedDocumentError(f"malformed {fmt.upper()}: {_first_line(exc)}") from exc
    except RecursionError as exc:
        raise MalformedDocumentError(f"malformed {fmt.upper()}: nested too deeply") from exc
    if not isinstance(doc, dict):
        raise MalformedDocumentError(
            f"a {kind} document must be a mapping, not {type(doc).__name__}"
        )
    _check_tree(doc)
    return doc


def _check_tree(doc: dict[str, Any]) -> None:
    """Depth, size, finite numbers and JSON duplicates, without recursion."""
    stack: list[tuple[Any, tuple[Any, ...]]] = [(doc, ())]
    count = 1
    while stack:
        node, path = stack.pop()
        if isinstance(node, dict | list):
            count += len(node)
            if count > MAX_NODES:
                raise MalformedDocumentError(f"document holds more than {MAX_NODES} values")
            if len(path) >= MAX_DEPTH:
                raise MalformedDocumentError(
                    f"document nests deeper than {MAX_DEPTH} levels ({where(path)})"
                )
        if isinstance(node, _Duplicated):
            raise DuplicateKeyError(node.duplicate, path)
        if isinstance(node, dict):
            stack.extend((value, (*path, key)) for key, value in node.items())
        elif isinstance(node, list):
            stack.extend((item, (*path, i)) for i, item in enumerate(node))
        elif isinstance(node, float) and not math.isfinite(node):
            raise MalformedDocumentError(
                f"{node} {where(path)} is not a finite number (JSON has none)",
                path=format_path(path),
            )


def format_path(path: tuple[Any, ...]) -> str:
    """``spec.serverless.idleTimeout``, ``spec.litellm.aliases[2]``: where a value sits."""
    out = ""
    for part in path:
        if isinstance(part, int) and not isinstance(part, bool):
            out += f"[{part}]"
        elif isinstance(part, str) and part.isidentifier():
            out += f".{part}" if out else part
        else:
            out += f"[{short(part)}]"
    return out or "."


def where(path: tuple[Any, ...]) -> str:
    """``at spec.gpu`` or ``at the top level``, for error messages."""
    return f"at {format_path(path)}" if path else "at the top level"


def short(value: Any, limit: int = 80) -> str:
    """``repr(value)``, cut to ``limit`` characters: error messages never echo a whole body."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


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


def parse_catalog(
    doc: dict[str, Any],
    *,
    namespace: str | None,
    default_namespace: str,
    path_name: str | None = None,
) -> ModelCatalog:
    """Validate a decoded document into a ModelCatalog; ``status`` is ignored."""
    return parse_document(
        ModelCatalog, CATALOG_KIND, doc,
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
        raise MalformedDocumentError(
            f"apiVersion must be {API_VERSION!r}, not {short(api_version)}"
        )
    if kind != expected_kind:
        raise MalformedDocumentError(f"kind must be {expected_kind!r}, not {short(kind)}")
    doc = {k: v for k, v in doc.items() if k != "status"}
    meta = doc.get("metadata")
    if isinstance(meta, dict):
        meta = {k: v for k, v in meta.items() if k not in SERVER_FIELDS}
        doc["metadata"] = meta
        if path_name is not None:
            if "name" not in meta:
                meta["name"] = path_name
            elif meta["name"] != path_name:
                raise MalformedDocumentError(
                    f"metadata.name {short(meta['name'])} does not match the name in the path "
                    f"{short(path_name)}"
                )
        body_ns = meta.get("namespace")
        if namespace is not None and body_ns is not None and body_ns != namespace:
            raise MalformedDocumentError(
                f"metadata.namespace {short(body_ns)} does not match ?namespace={short(namespace)}"
            )
        if "namespace" not in meta:
            # An explicit null is left to the type check: namespace is a string.
            meta["namespace"] = namespace or default_namespace
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
