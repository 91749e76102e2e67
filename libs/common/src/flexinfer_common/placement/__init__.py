"""Placement core: which nodes can run an engine pod, and which of them is best.

The seed's scheduler extender (section 5) as a library, so the scheduler service wraps it in
HTTP and the controller's local runtime calls it directly. Nothing here imports a web
framework or a Kubernetes client (an import-linter contract keeps it so): nodes and pods
arrive as plain facts (``facts``), benchmark results and tenant usage through small
interfaces (``tps``, ``tenant``), and the filters and scorers are plugins behind one-method
interfaces with a name -> factory registry (``plugins``), combined by ``engine.Placement``.
For requests over many nodes the same plugins decide over node columns (``columns``,
``columnar``): facts laid out once per node change, filters and scores vectorised.
"""

from flexinfer_common.placement.arch import ArchSupport, VendorArchRule, default_arch_support
from flexinfer_common.placement.columnar import ColumnOutcome, ColumnPlacement
from flexinfer_common.placement.columns import NodeColumns
from flexinfer_common.placement.engine import (
    FilterOutcome,
    Placement,
    default_placement,
    normalise,
    normalise_columns,
)
from flexinfer_common.placement.facts import (
    IgnoreMalformed,
    Malformed,
    NodeFacts,
    PodFacts,
    device_class,
    node_facts,
    pod_facts,
)
from flexinfer_common.placement.plugins import (
    ColumnFilter,
    ColumnScorer,
    Filter,
    PluginDeps,
    PluginRegistry,
    ScoreContext,
    Scorer,
    default_registry,
)
from flexinfer_common.placement.tenant import (
    InMemoryTenantPods,
    TenantPods,
    TenantShare,
    tenant_share,
)
from flexinfer_common.placement.tps import (
    BenchmarkResults,
    BenchmarkSource,
    InMemoryBenchmarks,
    benchmark_key,
)
from flexinfer_common.placement.weights import PlacementWeights

__all__ = [
    "ArchSupport",
    "BenchmarkResults",
    "BenchmarkSource",
    "ColumnFilter",
    "ColumnOutcome",
    "ColumnPlacement",
    "ColumnScorer",
    "Filter",
    "FilterOutcome",
    "IgnoreMalformed",
    "InMemoryBenchmarks",
    "InMemoryTenantPods",
    "Malformed",
    "NodeColumns",
    "NodeFacts",
    "Placement",
    "PlacementWeights",
    "PluginDeps",
    "PluginRegistry",
    "PodFacts",
    "ScoreContext",
    "Scorer",
    "TenantPods",
    "TenantShare",
    "VendorArchRule",
    "benchmark_key",
    "default_arch_support",
    "default_placement",
    "default_registry",
    "device_class",
    "node_facts",
    "normalise",
    "normalise_columns",
    "pod_facts",
    "tenant_share",
]
