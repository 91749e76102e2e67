"""Read ``-f`` sources: files, directories and stdin, multi-document YAML or JSON.

Every document is parsed and validated before anything is sent, so a bad document late in
a file applies nothing: the error names the file and the line its document starts on.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Hashable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from flexinfer_cli.resources.errors import usage_error
from flexinfer_cli.resources.kinds import Kind, kind_by_name, known_kinds

Obj = dict[str, Any]
SUFFIXES = (".yaml", ".yml", ".json")
STDIN = "-"


@dataclass(frozen=True)
class Manifest:
    """One validated document."""

    where: str
    """``file.yaml:12``: the file and the line its document starts on."""
    kind: Kind
    name: str
    namespace: str | None
    """metadata.namespace, or the ``-n`` given (None: the server's default)."""
    body: Obj


class _Loader(yaml.SafeLoader):
    """safe_load that refuses a mapping naming one key twice (one value would be lost)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        """Build a mapping, refusing duplicate keys with the line of each."""
        seen: dict[Hashable, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, Hashable):
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {key!r} (first on line {seen[key]})",
                        key_node.start_mark,
                    )  # fmt: skip
                seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep)


def expand(sources: Iterable[str]) -> list[str]:
    """The files ``-f`` names: a directory's *.yaml, *.yml and *.json, sorted; ``-`` is stdin."""
    files: list[str] = []
    for source in sources:
        path = Path(source)
        if source != STDIN and path.is_dir():
            found = sorted(p for p in path.iterdir() if p.suffix in SUFFIXES and p.is_file())
            if not found:
                raise usage_error(f"{source}: no *.yaml, *.yml or *.json files in the directory")
            files.extend(str(p) for p in found)
        else:
            files.append(source)
    return files


def read_text(source: str) -> str:
    """The text of a file, or of stdin for ``-`` (exit 2 when unreadable or not UTF-8)."""
    try:
        if source == STDIN:
            return sys.stdin.read()
        return Path(source).read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise usage_error(f"{source}: not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    except OSError as exc:
        raise usage_error(f"cannot read {source}: {exc.strerror or exc}") from exc


def documents(source: str, text: str) -> Iterator[tuple[int, Any]]:
    """(start line, document) for every document of ``text``; exit 2 on bad syntax."""
    name = "stdin" if source == STDIN else source
    if source.endswith(".json") or text.lstrip().startswith(("{", "[")):
        try:
            yield 1, json.loads(text)
        except ValueError as exc:
            line = getattr(exc, "lineno", 1)
            raise usage_error(f"{name}:{line}: malformed JSON: {exc}") from exc
        return
    loader = _Loader(text)
    try:
        while loader.check_node():
            node = loader.get_node()
            if node is not None:
                yield node.start_mark.line + 1, loader.construct_document(node)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else 1
        raise usage_error(f"{name}:{line}: malformed YAML: {exc.problem or exc.context}") from exc
    except yaml.YAMLError as exc:
        raise usage_error(f"{name}: malformed YAML: {exc}") from exc
    finally:
        loader.dispose()


def _items(where: str, doc: Any) -> Iterator[Obj]:
    """The objects of one document: itself, or the items of a List (``get -o yaml`` output)."""
    if doc is None:
        return
    if not isinstance(doc, dict):
        raise usage_error(f"{where}: a document must be a mapping, not {type(doc).__name__}")
    kind = doc.get("kind")
    if isinstance(kind, str) and kind.endswith("List") and isinstance(doc.get("items"), list):
        for item in doc["items"]:
            yield from _items(where, item)
        return
    yield doc


def validate(where: str, doc: Obj, namespace: str | None) -> Manifest:
    """The document as a Manifest, checked as the server would check it (exit 2 if not)."""
    from flexinfer_common.errors import FlexInferError
    from flexinfer_controller.core.documents import parse_document

    kind = kind_by_name(str(doc.get("kind")))
    if kind is None:
        raise usage_error(
            f"{where}: kind {doc.get('kind')!r} is not served here (served: {known_kinds()})"
        )
    try:
        parsed = parse_document(
            kind.type, kind.name, dict(doc), namespace=namespace, default_namespace="default"
        )
    except FlexInferError as exc:
        raise usage_error(f"{where}: {kind.name}: {exc}") from exc
    meta = doc.get("metadata") or {}
    ns = meta.get("namespace") if isinstance(meta, dict) else None
    return Manifest(where, kind, parsed.metadata.name, ns or namespace, doc)


def load(sources: Iterable[str], namespace: str | None) -> list[Manifest]:
    """Every document of every source, validated; nothing is returned unless all are valid."""
    manifests: list[Manifest] = []
    for source in expand(sources):
        name = "stdin" if source == STDIN else source
        for line, doc in documents(source, read_text(source)):
            where = f"{name}:{line}"
            manifests.extend(validate(where, item, namespace) for item in _items(where, doc))
    if not manifests:
        raise usage_error(f"no objects in {', '.join(sources)}")
    return manifests
