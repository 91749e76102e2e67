"""The seed's score terms, each per node (the reference) and over node columns.

``scores`` is the specification in plain Python, one node at a time; ``column_scores``
computes the same floats with the same IEEE operations in the same order over
``NodeColumns`` rows (numpy's elementwise float64 arithmetic is Python's), so the sums are
equal to the bit. The placement tests hold the two equal over randomised node sets.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from flexinfer_common.placement.columns import Floats, NodeColumns, Rows
from flexinfer_common.placement.facts import NodeFacts, PodFacts
from flexinfer_common.placement.tenant import TenantShare
from flexinfer_common.placement.tps import BenchmarkResults

KV_PRESSURE_WATERMARK = 0.85
KV_PRESSURE_SLOPE = 20.0


@dataclass(slots=True)
class ScoreContext:
    """What a decision read once for all nodes: benchmark results and the tenant's share."""

    benchmarks: BenchmarkResults = field(default_factory=BenchmarkResults)
    tenant: TenantShare | None = None


class TPSScorer:
    """+ tps x SCHED_TPS_WEIGHT."""

    def __init__(self, weight: float) -> None:
        self._w = weight

    def scores(self, pod: PodFacts, nodes: Sequence[NodeFacts], ctx: ScoreContext) -> list[float]:
        """Benchmarked tokens/s on each node's device class, weighted."""
        tps = ctx.benchmarks.tps
        classes = {node.device_class for node in nodes}
        by_class = {dc: tps(pod.backend, pod.model, dc) * self._w for dc in classes}
        return [by_class[node.device_class] for node in nodes]

    def column_scores(
        self, pod: PodFacts, table: NodeColumns, rows: Rows, ctx: ScoreContext
    ) -> Floats:
        """``scores`` over columns: one lookup per device class id among the rows."""
        ids = table.device_class[rows]
        by_class = np.zeros(len(table.classes))
        tps = ctx.benchmarks.tps
        for dc in np.flatnonzero(np.bincount(ids, minlength=len(by_class))).tolist():
            by_class[dc] = tps(pod.backend, pod.model, table.classes[dc]) * self._w
        return by_class[ids]


class UtilScorer:
    """- util x SCHED_UTIL_WEIGHT."""

    def __init__(self, weight: float) -> None:
        self._w = weight

    def scores(self, pod: PodFacts, nodes: Sequence[NodeFacts], ctx: ScoreContext) -> list[float]:
        """GPU utilisation (percent), weighted, as a penalty."""
        return [-node.util * self._w for node in nodes]

    def column_scores(
        self, pod: PodFacts, table: NodeColumns, rows: Rows, ctx: ScoreContext
    ) -> Floats:
        """``scores`` over columns."""
        return -table.util[rows] * self._w


class CostScorer:
    """- cost x SCHED_COST_WEIGHT."""

    def __init__(self, weight: float) -> None:
        self._w = weight

    def scores(self, pod: PodFacts, nodes: Sequence[NodeFacts], ctx: ScoreContext) -> list[float]:
        """The node's cost, weighted, as a penalty."""
        return [-node.cost * self._w for node in nodes]

    def column_scores(
        self, pod: PodFacts, table: NodeColumns, rows: Rows, ctx: ScoreContext
    ) -> Floats:
        """``scores`` over columns."""
        return -table.cost[rows] * self._w


class CacheUsageScorer:
    """- cacheUsage x SCHED_CACHE_WEIGHT."""

    def __init__(self, weight: float) -> None:
        self._w = weight

    def scores(self, pod: PodFacts, nodes: Sequence[NodeFacts], ctx: ScoreContext) -> list[float]:
        """KV-cache usage, weighted, as a penalty."""
        return [-node.cache_usage * self._w for node in nodes]

    def column_scores(
        self, pod: PodFacts, table: NodeColumns, rows: Rows, ctx: ScoreContext
    ) -> Floats:
        """``scores`` over columns."""
        return -table.cache_usage[rows] * self._w


class FreeVRAMScorer:
    """+ freeRatio x SCHED_VRAM_FREE_WEIGHT."""

    def __init__(self, weight: float) -> None:
        self._w = weight

    def scores(self, pod: PodFacts, nodes: Sequence[NodeFacts], ctx: ScoreContext) -> list[float]:
        """The free share of the node's VRAM, weighted."""
        return [node.free_ratio * self._w for node in nodes]

    def column_scores(
        self, pod: PodFacts, table: NodeColumns, rows: Rows, ctx: ScoreContext
    ) -> Floats:
        """``scores`` over columns."""
        return table.free_ratio[rows] * self._w


class KVPressureScorer:
    """- kvPressurePenalty: (cacheUsage - 0.85) x 20 above the 0.85 watermark, else 0."""

    def scores(self, pod: PodFacts, nodes: Sequence[NodeFacts], ctx: ScoreContext) -> list[float]:
        """The penalty, negated."""
        return [
            -(node.cache_usage - KV_PRESSURE_WATERMARK) * KV_PRESSURE_SLOPE
            if node.cache_usage > KV_PRESSURE_WATERMARK
            else 0.0
            for node in nodes
        ]

    def column_scores(
        self, pod: PodFacts, table: NodeColumns, rows: Rows, ctx: ScoreContext
    ) -> Floats:
        """``scores`` over columns."""
        usage = table.cache_usage[rows]
        penalty = -(usage - KV_PRESSURE_WATERMARK) * KV_PRESSURE_SLOPE
        return np.where(usage > KV_PRESSURE_WATERMARK, penalty, 0.0)


class TenantScorer:
    """+ tenantAdjustment (the same for every node; 0 when fair share is off)."""

    def scores(self, pod: PodFacts, nodes: Sequence[NodeFacts], ctx: ScoreContext) -> list[float]:
        """The tenant's adjustment for each node."""
        adjustment = ctx.tenant.adjustment if ctx.tenant is not None else 0.0
        return [adjustment] * len(nodes)

    def column_scores(
        self, pod: PodFacts, table: NodeColumns, rows: Rows, ctx: ScoreContext
    ) -> Floats:
        """``scores`` over columns."""
        adjustment = ctx.tenant.adjustment if ctx.tenant is not None else 0.0
        return np.full(len(rows), adjustment, dtype=np.float64)
