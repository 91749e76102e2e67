"""Filters and scorers: one-method plugins, built by name from a registry.

As in the llm-d scheduler, each plugin sees the whole candidate list at once (a list in, a
list out, aligned with it), so a decision over a thousand nodes is a few list passes rather
than thousands of calls. A filter answers, per node, None (pass) or the reason it rejects
the node; the reason starts with the seed's failure text (``No vendor label``,
``Insufficient VRAM``, ``Unsupported arch``). A scorer answers its signed, weighted term of
the seed's score; the score is their sum.

A plugin may also offer a vectorised form over ``NodeColumns`` rows (``ColumnFilter``,
``ColumnScorer``); its per-node form stays the reference, and the two must agree exactly.
A profile whose plugins all have one decides over columns (``Placement.columnar``). The
seed's plugins live in ``filters`` and ``scorers``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from flexinfer_common.placement.arch import ArchSupport, default_arch_support
from flexinfer_common.placement.columns import Floats, NodeColumns, Rows
from flexinfer_common.placement.facts import NodeFacts, PodFacts
from flexinfer_common.placement.filters import (
    INSUFFICIENT_VRAM,
    NO_VENDOR_LABEL,
    UNSUPPORTED_ARCH,
    ArchFilter,
    FreeVRAMFilter,
    Rejections,
    VendorLabelFilter,
)
from flexinfer_common.placement.scorers import (
    KV_PRESSURE_SLOPE,
    KV_PRESSURE_WATERMARK,
    CacheUsageScorer,
    CostScorer,
    FreeVRAMScorer,
    KVPressureScorer,
    ScoreContext,
    TenantScorer,
    TPSScorer,
    UtilScorer,
)
from flexinfer_common.placement.weights import PlacementWeights

__all__ = [
    "DEFAULT_FILTERS",
    "DEFAULT_SCORERS",
    "INSUFFICIENT_VRAM",
    "KV_PRESSURE_SLOPE",
    "KV_PRESSURE_WATERMARK",
    "NO_VENDOR_LABEL",
    "UNSUPPORTED_ARCH",
    "ArchFilter",
    "CacheUsageScorer",
    "ColumnFilter",
    "ColumnScorer",
    "CostScorer",
    "Filter",
    "FreeVRAMFilter",
    "FreeVRAMScorer",
    "KVPressureScorer",
    "PluginDeps",
    "PluginRegistry",
    "Rejections",
    "ScoreContext",
    "Scorer",
    "TPSScorer",
    "TenantScorer",
    "UtilScorer",
    "VendorLabelFilter",
    "default_registry",
]


class Filter(Protocol):
    """A hard gate."""

    def reasons(self, pod: PodFacts, nodes: Sequence[NodeFacts]) -> list[str | None]:
        """Per node: None when it passes, else why it cannot run ``pod``."""


class Scorer(Protocol):
    """One term of the score."""

    def scores(self, pod: PodFacts, nodes: Sequence[NodeFacts], ctx: ScoreContext) -> list[float]:
        """Per node: this term's signed, weighted contribution."""


@runtime_checkable
class ColumnFilter(Filter, Protocol):
    """A filter that also decides over node columns, as ``reasons`` would for those nodes.

    Its verdict on a node depends on the pod and that node alone (so a profile may run it
    on the rows the previous filters passed, in any grouping)."""

    def column_reasons(self, pod: PodFacts, table: NodeColumns, rows: Rows) -> Rejections:
        """Which of ``rows`` it rejects, and the rejected rows' reasons in row order."""


@runtime_checkable
class ColumnScorer(Scorer, Protocol):
    """A scorer that also scores node columns: the same floats ``scores`` gives."""

    def column_scores(
        self, pod: PodFacts, table: NodeColumns, rows: Rows, ctx: ScoreContext
    ) -> Floats:
        """Per row: this term's signed, weighted contribution."""


@dataclass(frozen=True, slots=True)
class PluginDeps:
    """What factories may build a plugin from."""

    weights: PlacementWeights = field(default_factory=PlacementWeights)
    arch: ArchSupport = field(default_factory=default_arch_support)


FilterFactory = Callable[[PluginDeps], Filter]
ScorerFactory = Callable[[PluginDeps], Scorer]


class PluginRegistry:
    """Plugin name -> factory, for filters and for scorers."""

    def __init__(self) -> None:
        self._filters: dict[str, FilterFactory] = {}
        self._scorers: dict[str, ScorerFactory] = {}

    def register_filter(self, name: str, factory: FilterFactory) -> None:
        """Make ``name`` build a filter; a name is registered once."""
        if name in self._filters:
            raise ValueError(f"filter {name!r} is already registered")
        self._filters[name] = factory

    def register_scorer(self, name: str, factory: ScorerFactory) -> None:
        """Make ``name`` build a scorer; a name is registered once."""
        if name in self._scorers:
            raise ValueError(f"scorer {name!r} is already registered")
        self._scorers[name] = factory

    def filter(self, name: str, deps: PluginDeps) -> Filter:
        """The filter called ``name``; KeyError naming the known ones if unknown."""
        if name not in self._filters:
            raise KeyError(f"unknown filter {name!r} (known: {', '.join(sorted(self._filters))})")
        return self._filters[name](deps)

    def scorer(self, name: str, deps: PluginDeps) -> Scorer:
        """The scorer called ``name``; KeyError naming the known ones if unknown."""
        if name not in self._scorers:
            raise KeyError(f"unknown scorer {name!r} (known: {', '.join(sorted(self._scorers))})")
        return self._scorers[name](deps)


DEFAULT_FILTERS = ("gpu-vendor", "free-vram", "gpu-arch")
"""The seed's checks, in its order."""
DEFAULT_SCORERS = (
    "tps",
    "utilization",
    "cost",
    "kv-cache",
    "vram-free",
    "kv-pressure",
    "tenant-fairshare",
)
"""The seed's score terms, in its order."""


def default_registry() -> PluginRegistry:
    """A registry of the seed's filters and scorers."""
    registry = PluginRegistry()
    registry.register_filter("gpu-vendor", lambda deps: VendorLabelFilter())
    registry.register_filter("free-vram", lambda deps: FreeVRAMFilter())
    registry.register_filter("gpu-arch", lambda deps: ArchFilter(deps.arch))
    registry.register_scorer("tps", lambda deps: TPSScorer(deps.weights.tps_weight))
    registry.register_scorer("utilization", lambda deps: UtilScorer(deps.weights.util_weight))
    registry.register_scorer("cost", lambda deps: CostScorer(deps.weights.cost_weight))
    registry.register_scorer("kv-cache", lambda deps: CacheUsageScorer(deps.weights.cache_weight))
    registry.register_scorer(
        "vram-free", lambda deps: FreeVRAMScorer(deps.weights.vram_free_weight)
    )
    registry.register_scorer("kv-pressure", lambda deps: KVPressureScorer())
    registry.register_scorer("tenant-fairshare", lambda deps: TenantScorer())
    return registry
