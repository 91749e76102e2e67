"""Every Prometheus metric family the services' and libraries' source defines, found with
``ast``: a call of a prometheus_client metric class (or a ``*MetricFamily`` of a custom
collector, or the proxy's ``FastHistogram``) whose first argument is a literal name."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

METRIC_CLASSES = frozenset({"Counter", "Gauge", "Histogram", "Summary", "Info", "Enum"})
"""prometheus_client's metric classes; ``*MetricFamily`` and ``*Histogram`` also count."""

NAME = re.compile(r"[a-z_][a-z0-9_]*")


@dataclass(frozen=True)
class Family:
    """One family as a scrape shows it (a counter's name ends in ``_total``)."""

    name: str
    kind: str
    labels: tuple[str, ...] | None
    """None when the source names them through a variable."""
    help: str
    source: Path


def _kind(func: ast.expr) -> str | None:
    name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
    if not isinstance(name, str):
        return None
    if name in METRIC_CLASSES:
        return name.lower()
    for kind in ("Counter", "Gauge", "Histogram", "Summary", "Info"):
        if name.endswith((f"{kind}MetricFamily", kind)):
            return kind.lower()
    return None


def _exported(name: str, kind: str) -> str:
    """The family's name in the exposition: prometheus_client adds these suffixes."""
    if kind == "counter":
        return name if name.endswith("_total") else name + "_total"
    if kind == "info":
        return name + "_info"
    return name


def _labels(call: ast.Call) -> tuple[str, ...] | None:
    value = next((k.value for k in call.keywords if k.arg in ("labelnames", "labels")), None)
    if value is None and len(call.args) > 2:
        value = call.args[2]
    if value is None:
        return ()
    if isinstance(value, ast.List | ast.Tuple):
        return tuple(str(e.value) for e in value.elts if isinstance(e, ast.Constant))
    return None


def _calls(tree: ast.AST) -> list[tuple[ast.Call, str | None]]:
    """Every call with the metric kind it constructs: a metric class's, or, for
    ``super().__init__`` inside a subclass of one (the proxy's request histogram), its base's."""
    calls: list[tuple[ast.Call, str | None]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            kinds = [k for k in (_kind(b) for b in node.bases) if k is not None]
            for inner in ast.walk(node):
                if (
                    isinstance(inner, ast.Call)
                    and kinds
                    and ast.unparse(inner.func) == ("super().__init__")
                ):
                    calls.append((inner, kinds[0]))
        elif isinstance(node, ast.Call):
            calls.append((node, _kind(node.func)))
    return calls


def families_in(path: Path) -> list[Family]:
    """The families defined in one source file."""
    found = []
    for node, kind in _calls(ast.parse(path.read_text())):
        if not node.args:
            continue
        first = node.args[0]
        if kind is None or not isinstance(first, ast.Constant) or not isinstance(first.value, str):
            continue
        if not NAME.fullmatch(first.value) or "_" not in first.value:
            continue
        second = node.args[1] if len(node.args) > 1 else None
        text = second.value if isinstance(second, ast.Constant) else ""
        found.append(Family(_exported(first.value, kind), kind, _labels(node), str(text), path))
    return found


def source_families(repo: Path) -> dict[str, Family]:
    """Every family under services/*/src and libs/*/src, by exported name."""
    roots = [*sorted(repo.glob("services/*/src")), *sorted(repo.glob("libs/*/src"))]
    return {f.name: f for root in roots for path in root.rglob("*.py") for f in families_in(path)}
