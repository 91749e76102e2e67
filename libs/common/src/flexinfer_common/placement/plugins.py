"""Filters and scorers: one-method plugins, built by name from a registry.

As in the llm-d scheduler, each plugin sees the whole candidate list at once (a list in, a
list out, aligned with it), so a decision over a thousand nodes is a few list passes rather
than thousands of calls. A filter answers, per node, None (pass) or the reason it rejects
the node; the reason starts with the seed's failure text (``No vendor label``,
``Insufficient VRAM``, ``Unsupported arch``). A scorer answers its signed, weighted term of
the seed's score; the score is their sum.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from flexinfer_common.placement.arch import ArchSupport, default_arch_support
from flexinfer_common.placement.facts import NodeFacts, PodFacts
from flexinfer_common.placement.tenant import TenantShare
from flexinfer_common.placement.tps import BenchmarkResults
from flexinfer_common.placement.weights import PlacementWeights

NO_VENDOR_LABEL = "No vendor label"
INSUFFICIENT_VRAM = "Insufficient VRAM"
UNSUPPORTED_ARCH = "Unsupported arch"
KV_PRESSURE_WATERMARK = 0.85
KV_PRESSURE_SLOPE = 20.0


@dataclass(slots=True)
class ScoreContext:
    """What a decision read once for all nodes: benchmark results and the tenant's share."""

    benchmarks: BenchmarkResults = field(default_factory=BenchmarkResults)
    tenant: TenantShare | None = None


class Filter(Protocol):
    """A hard gate."""

    def reasons(self, pod: PodFacts, nodes: Sequence[NodeFacts]) -> list[str | None]:
        """Per node: None when it passes, else why it cannot run ``pod``."""


class Scorer(Protocol):
    """One term of the score."""

    def scores(self, pod: PodFacts, nodes: Sequence[NodeFacts], ctx: ScoreContext) -> list[float]:
        """Per node: this term's signed, weighted contribution."""


@dataclass(frozen=True, slots=True)
class PluginDeps:
    """What factories may build a plugin from."""

    weights: PlacementWeights = field(default_factory=PlacementWeights)
    arch: ArchSupport = field(default_factory=default_arch_support)


FilterFactory = Callable[[PluginDeps], Filter]
ScorerFactory = Callable[[PluginDeps], Scorer]


class VendorLabelFilter:
    """Check 1: the node carries a ``flexinfer.ai/gpu.vendor`` label."""

    def reasons(self, pod: PodFacts, nodes: Sequence[NodeFacts]) -> list[str | None]:
        """``No vendor label`` for nodes without one."""
        return [None if node.vendor else NO_VENDOR_LABEL for node in nodes]


class FreeVRAMFilter:
    """Check 2: free VRAM >= the pod's estimate x its GPUs, when both are known."""

    def reasons(self, pod: PodFacts, nodes: Sequence[NodeFacts]) -> list[str | None]:
        """``Insufficient VRAM: ...`` for nodes with too little free memory."""
        estimate = pod.vram_estimate_mb
        if estimate is None:
            return [None] * len(nodes)
        # A pod that names an estimate but no GPU resource still needs one GPU's worth.
        gpus = max(pod.gpu_count, 1)
        needed = estimate * gpus
        return [
            None
            if node.free_mb is None or node.free_mb >= needed
            else f"{INSUFFICIENT_VRAM}: {node.free_mb:g} MB free, {needed:g} MB needed "
            f"({estimate:g} MB x {gpus} GPU{'s' if gpus > 1 else ''})"
            for node in nodes
        ]


class ArchFilter:
    """Check 3: the pod's backend runs on the node's GPU architecture, when both are known."""

    def __init__(self, arch: ArchSupport) -> None:
        self._arch = arch

    def reasons(self, pod: PodFacts, nodes: Sequence[NodeFacts]) -> list[str | None]:
        """``Unsupported arch: ...`` for nodes whose architecture the backend lacks."""
        backend = pod.backend
        if backend is None:
            return [None] * len(nodes)
        # A fleet has few distinct (vendor, arch) pairs: decide each once per call.
        verdicts: dict[tuple[str | None, str | None], str | None] = {}
        out: list[str | None] = []
        for node in nodes:
            pair = (node.vendor, node.arch)
            if pair not in verdicts:
                verdicts[pair] = self._verdict(backend, *pair)
            out.append(verdicts[pair])
        return out

    def _verdict(self, backend: str, vendor: str | None, arch: str | None) -> str | None:
        if vendor is None or arch is None or self._arch.supports(backend, vendor, arch):
            return None
        return f"{UNSUPPORTED_ARCH}: backend {backend} does not run on {vendor} {arch}"


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


class UtilScorer:
    """- util x SCHED_UTIL_WEIGHT."""

    def __init__(self, weight: float) -> None:
        self._w = weight

    def scores(self, pod: PodFacts, nodes: Sequence[NodeFacts], ctx: ScoreContext) -> list[float]:
        """GPU utilisation (percent), weighted, as a penalty."""
        return [-node.util * self._w for node in nodes]


class CostScorer:
    """- cost x SCHED_COST_WEIGHT."""

    def __init__(self, weight: float) -> None:
        self._w = weight

    def scores(self, pod: PodFacts, nodes: Sequence[NodeFacts], ctx: ScoreContext) -> list[float]:
        """The node's cost, weighted, as a penalty."""
        return [-node.cost * self._w for node in nodes]


class CacheUsageScorer:
    """- cacheUsage x SCHED_CACHE_WEIGHT."""

    def __init__(self, weight: float) -> None:
        self._w = weight

    def scores(self, pod: PodFacts, nodes: Sequence[NodeFacts], ctx: ScoreContext) -> list[float]:
        """KV-cache usage, weighted, as a penalty."""
        return [-node.cache_usage * self._w for node in nodes]


class FreeVRAMScorer:
    """+ freeRatio x SCHED_VRAM_FREE_WEIGHT."""

    def __init__(self, weight: float) -> None:
        self._w = weight

    def scores(self, pod: PodFacts, nodes: Sequence[NodeFacts], ctx: ScoreContext) -> list[float]:
        """The free share of the node's VRAM, weighted."""
        return [node.free_ratio * self._w for node in nodes]


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


class TenantScorer:
    """+ tenantAdjustment (the same for every node; 0 when fair share is off)."""

    def scores(self, pod: PodFacts, nodes: Sequence[NodeFacts], ctx: ScoreContext) -> list[float]:
        """The tenant's adjustment for each node."""
        adjustment = ctx.tenant.adjustment if ctx.tenant is not None else 0.0
        return [adjustment] * len(nodes)


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
