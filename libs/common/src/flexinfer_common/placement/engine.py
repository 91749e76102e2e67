"""A placement decision: run the filters in order, sum the scorers, normalise for the extender."""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from flexinfer_common.placement.columnar import ColumnPlacement
from flexinfer_common.placement.columns import Floats
from flexinfer_common.placement.facts import NodeFacts, PodFacts
from flexinfer_common.placement.plugins import (
    DEFAULT_FILTERS,
    DEFAULT_SCORERS,
    ColumnFilter,
    ColumnScorer,
    Filter,
    PluginDeps,
    PluginRegistry,
    ScoreContext,
    Scorer,
    default_registry,
)

MAX_EXTENDER_PRIORITY = 10
"""kube-scheduler's extender score range is 0..10 (extenderv1.MaxExtenderPriority)."""


@dataclass(slots=True)
class FilterOutcome:
    """The nodes that passed every filter, and each rejected node's first failing reason."""

    passed: list[NodeFacts] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    rejections: dict[str, int] = field(default_factory=dict)
    """Nodes rejected per filter (its class name: a bounded metric label, unlike reasons)."""


class Placement:
    """The filters and scorers of one profile."""

    def __init__(self, filters: Sequence[Filter], scorers: Sequence[Scorer]) -> None:
        self._filters = tuple(filters)
        self._scorers = tuple(scorers)

    def columnar(self) -> ColumnPlacement | None:
        """This profile over node columns, when every plugin has a vectorised form; else None
        (the caller decides per node)."""
        filters = [f for f in self._filters if isinstance(f, ColumnFilter)]
        scorers = [s for s in self._scorers if isinstance(s, ColumnScorer)]
        if len(filters) < len(self._filters) or len(scorers) < len(self._scorers):
            return None
        return ColumnPlacement(filters, scorers)

    def filter(self, pod: PodFacts, nodes: Sequence[NodeFacts]) -> FilterOutcome:
        """Run each filter on the nodes the previous ones passed (the seed's order)."""
        outcome = FilterOutcome(passed=list(nodes))
        for check in self._filters:
            if not outcome.passed:
                break
            survivors: list[NodeFacts] = []
            for node, reason in zip(
                outcome.passed, check.reasons(pod, outcome.passed), strict=True
            ):
                if reason is None:
                    survivors.append(node)
                else:
                    outcome.failed[node.name] = reason
                    name = type(check).__name__
                    outcome.rejections[name] = outcome.rejections.get(name, 0) + 1
            outcome.passed = survivors
        return outcome

    def score(self, pod: PodFacts, nodes: Sequence[NodeFacts], ctx: ScoreContext) -> list[float]:
        """Each node's raw score: the sum of every scorer's term."""
        totals = [0.0] * len(nodes)
        for scorer in self._scorers:
            terms = scorer.scores(pod, nodes, ctx)
            if len(terms) != len(totals):
                raise ValueError(f"{type(scorer).__name__} scored {len(terms)} of {len(totals)}")
            totals = list(map(operator.add, totals, terms))
        return totals

    def best(
        self, pod: PodFacts, nodes: Sequence[NodeFacts], ctx: ScoreContext
    ) -> tuple[NodeFacts | None, FilterOutcome]:
        """The highest scoring node that passes (ties: by name), and the filter outcome."""
        outcome = self.filter(pod, nodes)
        if not outcome.passed:
            return None, outcome
        scores = self.score(pod, outcome.passed, ctx)
        ranked = sorted(zip(scores, outcome.passed, strict=True), key=lambda p: (-p[0], p[1].name))
        return ranked[0][1], outcome


def normalise(scores: Sequence[float], top: int = MAX_EXTENDER_PRIORITY) -> list[int]:
    """Raw scores onto 0..``top`` by min-max, rounded half up; all equal -> all ``top``."""
    if not scores:
        return []
    low, high = min(scores), max(scores)
    span = high - low
    if span <= 0 or not math.isfinite(span):
        return [top] * len(scores)
    scale = top / span
    return [math.floor((s - low) * scale + 0.5) for s in scores]


def normalise_columns(scores: Floats, top: int = MAX_EXTENDER_PRIORITY) -> list[int]:
    """``normalise`` over an array, with the same operations on finite scores.

    Anything else (a NaN, whose min and max depend on the order Python's builtins meet it,
    or a span so small that the scale overflows) is handed to ``normalise`` itself.
    """
    if not len(scores) or not np.isfinite(scores).all():
        return normalise(scores.tolist(), top)
    low, high = float(scores.min()), float(scores.max())
    span = high - low
    if span <= 0 or not math.isfinite(span):
        return [top] * len(scores)
    scale = top / span
    if not math.isfinite(scale):
        return normalise(scores.tolist(), top)
    normalised: list[int] = np.floor((scores - low) * scale + 0.5).astype(np.intp).tolist()
    return normalised


def default_placement(
    deps: PluginDeps | None = None,
    registry: PluginRegistry | None = None,
    filters: Sequence[str] = DEFAULT_FILTERS,
    scorers: Sequence[str] = DEFAULT_SCORERS,
) -> Placement:
    """The seed's profile (or the named plugins) built from ``registry``."""
    deps = deps or PluginDeps()
    registry = registry or default_registry()
    return Placement(
        [registry.filter(name, deps) for name in filters],
        [registry.scorer(name, deps) for name in scorers],
    )
