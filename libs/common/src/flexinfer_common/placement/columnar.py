"""A placement decision over node columns: ``engine.Placement``'s filter and score, vectorised.

Built by ``Placement.columnar`` from a profile whose plugins all have vectorised forms. It
gives exactly what the per-node ``Placement`` gives for the same nodes in the same order:
the same passing nodes, the same first-failing reason per rejected node (in the same
insertion order), the same raw scores to the bit and the same 0..10 scores.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from flexinfer_common.placement.columns import Floats, NodeColumns, Rows
from flexinfer_common.placement.facts import PodFacts
from flexinfer_common.placement.plugins import ColumnFilter, ColumnScorer, ScoreContext


@dataclass(slots=True)
class ColumnOutcome:
    """The rows that passed every filter (in order), and the rejected rows with their reasons:
    each filter's in row order, the filters in the profile's order (so a row asked twice is
    rejected twice, by the same filter, for the same reason)."""

    passed: Rows
    failed_rows: Rows = field(default_factory=lambda: np.empty(0, dtype=np.intp))
    failed_reasons: list[str] = field(default_factory=list)
    rejections: dict[str, int] = field(default_factory=dict)
    """Nodes rejected per filter (its class name), as ``FilterOutcome.rejections``."""

    def failed(self, table: NodeColumns) -> dict[str, str]:
        """Each rejected node's name -> its reason, in order (``FilterOutcome.failed``)."""
        return dict(zip(table.name[self.failed_rows].tolist(), self.failed_reasons, strict=True))


class ColumnPlacement:
    """The filters and scorers of one profile, over ``NodeColumns`` rows."""

    def __init__(self, filters: Sequence[ColumnFilter], scorers: Sequence[ColumnScorer]) -> None:
        self._filters = tuple(filters)
        self._scorers = tuple(scorers)

    def filter(self, pod: PodFacts, table: NodeColumns, rows: Rows) -> ColumnOutcome:
        """Run each filter on the rows the previous ones passed (the seed's order)."""
        outcome = ColumnOutcome(passed=rows)
        failed: list[Rows] = []
        for check in self._filters:
            if not len(outcome.passed):
                break
            rejected, reasons = check.column_reasons(pod, table, outcome.passed)
            if reasons:
                failed.append(outcome.passed[rejected])
                outcome.failed_reasons += reasons
                outcome.passed = outcome.passed[~rejected]
                name = type(check).__name__
                outcome.rejections[name] = outcome.rejections.get(name, 0) + len(reasons)
        if failed:
            outcome.failed_rows = np.concatenate(failed)
        return outcome

    def score(self, pod: PodFacts, table: NodeColumns, rows: Rows, ctx: ScoreContext) -> Floats:
        """Each row's raw score: the sum of every scorer's term, added in the scorers' order."""
        totals = np.zeros(len(rows))
        # Huge annotation values may overflow to inf, as the per-node sums do: not an error.
        with np.errstate(all="ignore"):
            for scorer in self._scorers:
                terms = scorer.column_scores(pod, table, rows, ctx)
                if terms.shape != totals.shape:
                    name = type(scorer).__name__
                    raise ValueError(f"{name} scored {len(terms)} of {len(totals)}")
                np.add(totals, terms, out=totals)  # in place: the same sums, no new array
        return totals
