"""The Placer of the reconcile's step 3: the scheduler's placement core, over GPUs.

The scheduler extender ranks nodes for kube-scheduler; the controller ranks the GPUs a
replica could run on with the same filters and scorers (``flexinfer_common.placement``),
so a local Model lands where the extender would put it. Each candidate is one GPU (or, for
``gpu.count`` > 1, the node's roomiest set of that many) as a ``NodeFacts``:

- its free memory is its VRAM less what the replicas holding it take: all of it for a
  Model that has the GPU to itself (``gpu.shared`` unset, as on Kubernetes, where a GPU
  resource is exclusive), its ``vramEstimateMB`` for a Model of a shared group;
- the core's filters run in their order (vendor label, free VRAM >= estimate x GPUs,
  architecture), then ``InUseFilter``: a Model that wants its GPU to itself never joins
  another replica, and a shared Model only joins replicas of its own group;
- the core's scorers rank the survivors (TPS from the benchmark table, utilisation, cost,
  KV cache, free ratio), ties by name.

A Model no GPU can take gets the filters' reasons, the roomiest GPU's first.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from flexinfer_common.placement import (
    BenchmarkResults,
    BenchmarkSource,
    IgnoreMalformed,
    Malformed,
    NodeFacts,
    Placement,
    PluginDeps,
    PluginRegistry,
    PodFacts,
    ScoreContext,
    default_registry,
    device_class,
    node_facts,
)
from flexinfer_common.placement.plugins import (
    DEFAULT_FILTERS,
    DEFAULT_SCORERS,
    INSUFFICIENT_VRAM,
    NO_VENDOR_LABEL,
    UNSUPPORTED_ARCH,
    Filter,
    Scorer,
)
from flexinfer_common.store import ModelStore
from flexinfer_controller.core.gpu import (
    Choice,
    GPURequest,
    Hold,
    NodeGPU,
    Unplaced,
    declared_labels,
)

log = logging.getLogger(__name__)

IN_USE = "GPU in use"
"""The reason ``InUseFilter`` gives, in the style of the core's failure texts."""
SHOWN_REASONS = 3
"""How many GPUs' reasons a Pending Model's message lists (the roomiest first)."""

_CONDITION_REASONS = {
    INSUFFICIENT_VRAM: "VRAMInsufficient",
    UNSUPPORTED_ARCH: "GPUArchUnsupported",
    NO_VENDOR_LABEL: "NoMatchingNodes",
    IN_USE: "GPUInUse",
}
"""The core's failure texts as the Schedulable condition's reasons (the reference's
``VRAMInsufficient`` and ``NoMatchingNodes`` where it has one)."""


class NoBenchmarks:
    """No benchmark table: every TPS is 0.0."""

    async def results(self, pod: PodFacts, sink: Malformed) -> BenchmarkResults:
        """Empty results."""
        return BenchmarkResults(sink=sink)


class StoreBenchmarks:
    """The store's benchmark table (``flexinfer bench tps`` writes it) as the TPS lookup's
    global table; local mode has no per-deployment ConfigMap, so that step finds nothing."""

    def __init__(self, store: ModelStore) -> None:
        self._store = store

    async def results(self, pod: PodFacts, sink: Malformed) -> BenchmarkResults:
        """The results of the pod's namespace, keyed as the global ConfigMap is."""
        records = await self._store.list_benchmarks(pod.namespace)
        table = {r.key: repr(r.tokens_per_second) for r in records}
        return BenchmarkResults(table, None, sink)


class LogMalformed:
    """Logs each malformed node value once (placement treats it as absent)."""

    def __init__(self) -> None:
        self._seen: set[tuple[str, str]] = set()

    def report(self, key: str, value: str) -> None:
        """Warn about ``key``'s value the first time it is seen."""
        if (key, value) not in self._seen:
            self._seen.add((key, value))
            log.warning("ignoring malformed %s value %r in GPU placement", key, value[:100])


@dataclass(frozen=True, slots=True)
class Candidate:
    """GPUs of one node that could take one replica."""

    node: NodeGPU
    devices: tuple[int, ...]
    facts: NodeFacts
    holders: tuple[str, ...]
    """The Models whose replicas on these GPUs keep this request off them."""

    @property
    def label(self) -> str:
        """``gpu 0 on n1`` (``gpus 0,1 on n1``), as a status message names it."""
        noun = "gpu" if len(self.devices) == 1 else "gpus"
        return f"{noun} {','.join(map(str, self.devices))} on {self.node.node}"


class InUseFilter:
    """GPUs held by a replica this request may not share with (see the module docstring)."""

    def __init__(self, holders: Mapping[str, tuple[str, ...]]) -> None:
        self._holders = holders

    def reasons(self, pod: PodFacts, nodes: Sequence[NodeFacts]) -> list[str | None]:
        """``GPU in use: ...`` for candidates another Model's replica holds."""
        out: list[str | None] = []
        for node in nodes:
            holders = self._holders.get(node.name, ())
            out.append(f"{IN_USE}: held by {', '.join(holders)}" if holders else None)
        return out


class CorePlacer:
    """The Placer: the placement core's filters and scorers, one candidate per GPU set."""

    def __init__(
        self,
        *,
        deps: PluginDeps | None = None,
        registry: PluginRegistry | None = None,
        benchmarks: BenchmarkSource | None = None,
        sink: Malformed | None = None,
        filters: Sequence[str] = DEFAULT_FILTERS,
        scorers: Sequence[str] = DEFAULT_SCORERS,
    ) -> None:
        deps = deps or PluginDeps()
        registry = registry or default_registry()
        self._filters: list[Filter] = [registry.filter(name, deps) for name in filters]
        self._scorers: list[Scorer] = [registry.scorer(name, deps) for name in scorers]
        self._benchmarks: BenchmarkSource = benchmarks or NoBenchmarks()
        self._sink: Malformed = sink or IgnoreMalformed()

    async def choose(
        self, request: GPURequest, nodes: Sequence[NodeGPU], holds: Sequence[Hold] | None
    ) -> Choice | Unplaced:
        """The best GPUs for one replica of ``request``, or the filters' reasons."""
        found = candidates(request, nodes, holds or (), self._sink)
        pod = PodFacts(
            namespace=request.namespace,
            name=request.name,
            backend=request.backend,
            model=request.name,
            vram_estimate_mb=request.vram_estimate_mb,
            gpu_count=request.count,
        )
        ctx = ScoreContext(await self._benchmarks.results(pod, self._sink))
        in_use = InUseFilter({c.facts.name: c.holders for c in found})
        placement = Placement([*self._filters, in_use], self._scorers)
        best, outcome = placement.best(pod, [c.facts for c in found], ctx)
        if best is None:
            return unplaced(found, outcome.failed)
        chosen = next(c for c in found if c.facts.name == best.name)
        return Choice(chosen.node, chosen.devices if holds is not None else None)


def candidates(
    request: GPURequest, nodes: Sequence[NodeGPU], holds: Sequence[Hold], sink: Malformed
) -> list[Candidate]:
    """One candidate per GPU of each node (per set of ``request.count`` GPUs when more)."""
    found: list[Candidate] = []
    for node in nodes:
        base = node_facts(node.node, node.labels or minimal_labels(node), node.annotations, sink)
        where = (node.node, node.vendor)
        on_node = [h for h in holds if (h.assignment.node, h.assignment.vendor) == where]
        gpus = [_device(node, index, on_node, request) for index in node.devices]
        if request.count > 1:
            # The set that leaves the most room: GPUs no one blocks, then the freest.
            gpus.sort(key=lambda g: (bool(g[2]), -(g[1] if g[1] is not None else 0), g[0]))
            sets = [sorted(gpus[: request.count])]  # pinned in index order
        else:
            sets = [[gpu] for gpu in gpus]
        for chosen in sets:
            found.append(_candidate(node, base, chosen))
    return found


def node_device_class(node: NodeGPU) -> str:
    """The device class the TPS lookup keys this node's GPUs by (``candidates``' too)."""
    return device_class(node.labels or minimal_labels(node))


def minimal_labels(node: NodeGPU) -> dict[str, str]:
    """The labels of a node known only by its fields (a fleet that kept no labels)."""
    vram = f"{node.vram_mb}Mi" if node.vram_mb is not None else None
    return declared_labels(node.vendor, node.count, node.arch, vram)


_Device = tuple[int, float | None, tuple[str, ...]]
"""(index, free MiB or None when the GPU's memory is unknown, blocking holders)."""


def _device(node: NodeGPU, index: int, holds: Sequence[Hold], request: GPURequest) -> _Device:
    """One GPU's free memory and the holders that keep ``request`` off it."""
    here = [h for h in holds if index in h.assignment.devices]
    taken = 0.0
    for hold in here:
        mine = hold.assignment
        if mine.shared is None:
            taken += node.vram_mb or 0  # a Model with the GPU to itself takes all of it
        else:
            taken += mine.reserved_mb or 0
    free = None if node.vram_mb is None else max(node.vram_mb - taken, 0.0)
    blocking = sorted(
        {h.model for h in here if request.shared is None or h.assignment.shared != request.shared}
    )
    return index, free, tuple(blocking)


def _candidate(node: NodeGPU, base: NodeFacts, gpus: Sequence[_Device]) -> Candidate:
    devices = tuple(g[0] for g in gpus)
    frees = [g[1] for g in gpus]
    free = None if any(f is None for f in frees) else sum(f for f in frees if f is not None)
    holders = tuple(sorted({h for g in gpus for h in g[2]}))
    facts = replace(
        base,
        name=f"{node.node}/gpu{'+'.join(map(str, devices))}",
        # The free ratio is that of these GPUs, not of the whole node.
        gpu_count=len(devices),
        vram_per_gpu_mb=float(node.vram_mb) if node.vram_mb is not None else None,
        free_mb=free,
    )
    return Candidate(node, devices, facts, holders)


def unplaced(found: Sequence[Candidate], failed: Mapping[str, str]) -> Unplaced:
    """Why no candidate passed: the roomiest GPUs' reasons, the first one's as the reason."""
    ranked = sorted(found, key=lambda c: (-(c.facts.free_mb or 0.0), c.facts.name))
    shown = [f"{c.label}: {failed[c.facts.name]}" for c in ranked[:SHOWN_REASONS]]
    more = len(ranked) - len(shown)
    if more > 0:
        shown.append(f"{more} more GPU{'s' if more > 1 else ''} rejected")
    first = failed[ranked[0].facts.name] if ranked else NO_VENDOR_LABEL
    reason = _CONDITION_REASONS.get(first.split(":", 1)[0], "NoMatchingNodes")
    message = "no GPU can take a replica: " + "; ".join(shown)
    return Unplaced(reason, message, permanent=False)
