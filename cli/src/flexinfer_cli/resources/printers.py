"""Output: kubectl-like tables, ``-o yaml|json``, and ``describe``."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import yaml

from flexinfer_cli.resources.kinds import Kind
from flexinfer_common.api.operations import UNLOADED_AT_ANNOTATION, pinned_in
from flexinfer_common.crd import Column

Obj = dict[str, Any]
NONE = "<none>"
FORMATS = ("table", "wide", "yaml", "json", "name")
HOLDING = ("Resident", "Sleeping")
"""Residencies whose engine holds its GPU."""


def lookup(obj: Obj, json_path: str) -> Any:
    """The value at a simple JSONPath (``.spec.gpu.shared``), or None."""
    value: Any = obj
    for part in json_path.strip(".").split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def age(timestamp: str | None, now: datetime | None = None) -> str:
    """``45s``, ``12m``, ``3h``, ``5d``, as kubectl shows an age."""
    if not timestamp:
        return NONE
    try:
        then = datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    except ValueError:
        return timestamp
    seconds = max(0, int(((now or datetime.now(UTC)) - then).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size * (2 if unit != "m" else 1):
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def cell(obj: Obj, column: Column) -> str:
    """One table cell."""
    status = obj.get("status") or {}
    if column.type == "ready":
        return f"{status.get('readyReplicas', 0)}/{status.get('desiredReplicas', 0)}"
    if column.type == "gpu":
        return held_gpu(status)
    if column.type == "pinned":
        annotations = lookup(obj, ".metadata.annotations") or {}
        return "true" if pinned_in(annotations) else NONE
    value = lookup(obj, column.json_path)
    if column.type == "date":
        return age(value if isinstance(value, str) else None)
    if value is None or value == "":
        return NONE
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def held_gpu(status: Obj) -> str:
    """``node/device`` of the GPU an engine holds (Resident, or Sleeping: its process keeps
    a context on the device); ``<none>`` when stopped or on CPU. status.gpu alone also
    names where a stopped Model would be placed, which it does not hold."""
    gpu = status.get("gpu") or {}
    if status.get("residency") not in HOLDING or not gpu.get("device"):
        return NONE
    return f"{gpu.get('node') or NONE}/{gpu['device']}"


def table(kind: Kind, items: Sequence[Obj], *, wide: bool) -> str:
    """The rows of ``items`` under NAME and the kind's columns, padded like kubectl's."""
    columns = kind.columns(wide=wide)
    rows = [["NAME", *(c.name.upper() for c in columns)]]
    for obj in items:
        rows.append([str(lookup(obj, ".metadata.name")), *(cell(obj, c) for c in columns)])
    return "\n".join(pad(rows)) + "\n"


def pad(rows: list[list[str]], indent: str = "") -> list[str]:
    """``rows`` as lines of columns three spaces apart."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        (indent + "   ".join(v.ljust(w) for v, w in zip(row, widths, strict=True))).rstrip()
        for row in rows
    ]


def render(kind: Kind, items: Sequence[Obj], fmt: str, *, single: bool) -> str:
    """``items`` in ``fmt``; ``single`` prints one object rather than a List."""
    if fmt in ("table", "wide"):
        if not items:
            return ""
        return table(kind, items, wide=fmt == "wide")
    if fmt == "name":
        return "".join(f"{kind.ref}/{lookup(o, '.metadata.name')}\n" for o in items)
    doc: Obj = items[0] if single else {"apiVersion": "v1", "kind": "List", "items": list(items)}
    if fmt == "json":
        return json.dumps(doc, indent=2) + "\n"
    return yaml.safe_dump(doc, sort_keys=False, default_flow_style=False, allow_unicode=True)


def _block(title: str, value: Any) -> list[str]:
    """``Title:`` and ``value`` as indented YAML (``<none>`` when empty)."""
    if not value:
        return [f"{title}:  {NONE}"]
    text = yaml.safe_dump(value, sort_keys=False, default_flow_style=False, allow_unicode=True)
    return [f"{title}:", *(f"  {line}" for line in text.rstrip().splitlines())]


def _conditions(conditions: list[Obj]) -> list[str]:
    if not conditions:
        return [f"Conditions:  {NONE}"]
    rows = [["TYPE", "STATUS", "REASON", "MESSAGE"]]
    for c in conditions:
        message = " ".join(str(c.get("message", "")).split())
        rows.append([str(c.get(k, "")) for k in ("type", "status", "reason")] + [message])
    return ["Conditions:", *pad(rows, indent="  ")]


def _residency(status: Obj, annotations: dict[str, str]) -> list[str]:
    """Residency (and the GPU held), pinned, and the last unload by hand."""
    gpu = held_gpu(status)
    where = f" on {gpu}" if gpu != NONE else ""
    pinned = pinned_in(annotations)
    return [
        f"Residency:    {status.get('residency') or NONE}{where}",
        f"Pinned:       {'true' if pinned else 'false'}",
        f"Unloaded at:  {annotations.get(UNLOADED_AT_ANNOTATION) or NONE}",
    ]


def describe(kind: Kind, obj: Obj) -> str:
    """A Model (or adapter) for people: metadata, spec, status and its conditions."""
    meta = obj.get("metadata") or {}
    status = dict(obj.get("status") or {})
    conditions = status.pop("conditions", []) or []
    created = meta.get("creationTimestamp")
    labels = ",".join(f"{k}={v}" for k, v in (meta.get("labels") or {}).items()) or NONE
    lines = [
        f"Name:         {meta.get('name')}",
        f"Namespace:    {meta.get('namespace', NONE)}",
        f"Kind:         {kind.name} ({obj.get('apiVersion', '')})",
        f"Labels:       {labels}",
        f"Created:      {created} ({age(created)} ago)" if created else f"Created:      {NONE}",
        f"Generation:   {meta.get('generation', NONE)}",
        f"Finalizers:   {','.join(meta.get('finalizers') or []) or NONE}",
    ]
    if meta.get("deletionTimestamp"):
        lines.append(f"Deleting:     since {meta['deletionTimestamp']}")
    if kind.name == "Model":
        lines.append(
            f"Replicas:     {status.get('readyReplicas', 0)} ready / "
            f"{status.get('desiredReplicas', 0)} desired / {status.get('replicas', 0)} running"
        )
        lines += _residency(status, meta.get("annotations") or {})
    lines += _block("Annotations", meta.get("annotations"))
    lines += _block("Spec", obj.get("spec"))
    lines += _block("Status", status)
    lines += _conditions(conditions)
    return "\n".join(lines) + "\n"
