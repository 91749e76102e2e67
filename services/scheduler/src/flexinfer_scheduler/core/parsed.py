"""Node facts of the Node objects requests carry, parsed once per node content.

Without ``nodeCacheCapable`` kube-scheduler sends every candidate Node whole with each
request, and between two requests a node's labels and annotations seldom change. Parsing
them into facts costs about a hundred times more than comparing them with the last ones
seen, so the facts are remembered per node name with the labels and annotations they came
from, and reused only when both are equal: the facts are a pure function of (name, labels,
annotations), so a reused one is the one a fresh parse would give. What that parse reported
as malformed is reported again, so the warning metric counts as if it had run.
"""

from __future__ import annotations

from dataclasses import dataclass

from flexinfer_common.placement import Malformed, NodeFacts, node_facts

NodeMeta = tuple[str, dict[str, str], dict[str, str]]
DEFAULT_LIMIT = 10_000
"""Nodes remembered; past it the one parsed longest ago is forgotten (a cluster's fit)."""


class _Recorder:
    """Passes reports on to the sink and keeps them, to replay when the facts are reused."""

    def __init__(self, sink: Malformed) -> None:
        self.sink = sink
        self.reports: list[tuple[str, str]] = []

    def report(self, key: str, value: str) -> None:
        """Report it, and remember it."""
        self.reports.append((key, value))
        self.sink.report(key, value)


@dataclass(frozen=True, slots=True)
class _Parsed:
    labels: dict[str, str]
    annotations: dict[str, str]
    facts: NodeFacts
    reports: tuple[tuple[str, str], ...]


class ParsedNodes:
    """Node metadata -> facts, parsed again only when a node's labels or annotations change."""

    def __init__(self, sink: Malformed, limit: int = DEFAULT_LIMIT) -> None:
        self._sink = sink
        self._limit = limit
        self._seen: dict[str, _Parsed] = {}

    def facts(self, nodes: list[NodeMeta]) -> list[NodeFacts]:
        """Each node's facts, in order."""
        out = []
        seen, sink = self._seen, self._sink
        for name, labels, notes in nodes:
            parsed = seen.get(name)
            if parsed is None or parsed.labels != labels or parsed.annotations != notes:
                parsed = self._parse(name, labels, notes)
            else:
                for key, value in parsed.reports:
                    sink.report(key, value)
            out.append(parsed.facts)
        return out

    def _parse(self, name: str, labels: dict[str, str], annotations: dict[str, str]) -> _Parsed:
        recorder = _Recorder(self._sink)
        facts = node_facts(name, labels, annotations, recorder)
        parsed = _Parsed(labels, annotations, facts, tuple(recorder.reports))
        self._seen.pop(name, None)  # re-inserted last: the oldest entry goes first
        if len(self._seen) >= self._limit:
            del self._seen[next(iter(self._seen))]
        self._seen[name] = parsed
        return parsed

    def __len__(self) -> int:
        return len(self._seen)
