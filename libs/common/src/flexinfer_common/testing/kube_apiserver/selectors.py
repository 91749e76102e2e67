"""Label selectors (=, ==, !=, in, notin, exists, !exists) and the metadata field selectors."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from flexinfer_common.testing.kube_apiserver.errors import ApiError

Predicate = Callable[[dict[str, Any]], bool]

_SET = re.compile(r"^\s*([^\s!=(),]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")
_EQ = re.compile(r"^\s*([^\s!=(),]+)\s*(==|=|!=)\s*([^\s!=(),]*)\s*$")
_EXISTS = re.compile(r"^\s*(!?)\s*([^\s!=(),]+)\s*$")


def _split(selector: str) -> list[str]:
    """Split at commas outside parentheses: ``a in (x,y),b`` is two requirements."""
    terms, depth, start = [], 0, 0
    for i, ch in enumerate(selector):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            terms.append(selector[start:i])
            start = i + 1
    terms.append(selector[start:])
    return [t for t in terms if t.strip()]


def _requirement(term: str) -> Callable[[dict[str, str]], bool]:
    if m := _SET.match(term):
        key, op = m.group(1), m.group(2)
        values = {v.strip() for v in m.group(3).split(",") if v.strip()}
        if op == "in":
            return lambda labels: labels.get(key) in values
        return lambda labels: labels.get(key) not in values
    if m := _EQ.match(term):
        key, op, value = m.group(1), m.group(2), m.group(3)
        if op == "!=":
            return lambda labels: labels.get(key) != value
        return lambda labels: labels.get(key) == value
    if m := _EXISTS.match(term):
        negated, key = m.group(1) == "!", m.group(2)
        return lambda labels: (key in labels) != negated
    raise ApiError(400, f"unable to parse requirement: {term.strip()!r}")


def label_selector(selector: str | None) -> Predicate:
    """The objects a ``labelSelector`` query parameter selects (400 if it does not parse)."""
    requirements = [_requirement(t) for t in _split(selector or "")]

    def matches(obj: dict[str, Any]) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return all(req(labels) for req in requirements)

    return matches


_FIELDS: dict[str, Callable[[dict[str, Any]], str]] = {
    "metadata.name": lambda o: str(o["metadata"].get("name", "")),
    "metadata.namespace": lambda o: str(o["metadata"].get("namespace", "")),
}


def field_selector(selector: str | None) -> Predicate:
    """A ``fieldSelector`` on metadata.name / metadata.namespace (= and !=), as every type has."""
    checks: list[Callable[[dict[str, Any]], bool]] = []
    for term in _split(selector or ""):
        m = _EQ.match(term)
        if not m or m.group(1) not in _FIELDS:
            raise ApiError(400, f'field label not supported: "{term.strip()}"')
        checks.append(_field_check(_FIELDS[m.group(1)], m.group(2) == "!=", m.group(3)))
    return lambda obj: all(check(obj) for check in checks)


def _field_check(
    get: Callable[[dict[str, Any]], str], negated: bool, value: str
) -> Callable[[dict[str, Any]], bool]:
    return lambda obj: (get(obj) == value) != negated
