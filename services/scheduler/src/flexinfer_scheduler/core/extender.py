"""The extender's two verbs over the placement core: filter and prioritize."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from flexinfer_common.placement import (
    BenchmarkSource,
    Malformed,
    NodeFacts,
    Placement,
    PlacementWeights,
    ScoreContext,
    TenantPods,
    TenantShare,
    normalise,
    tenant_share,
)
from flexinfer_scheduler.core.nodes import NodeLookup
from flexinfer_scheduler.core.parsed import ParsedNodes
from flexinfer_scheduler.core.protocol import ExtenderRequest

UNKNOWN_NODE = "Unknown node: not in the extender's node cache"

UNKNOWN_NODE_REASON = "UnknownNode"
"""The rejection reason (a metric label) of a node the scheduler has no facts about."""


class Extender:
    """Answers ExtenderArgs with ExtenderFilterResult and HostPriorityList bodies."""

    def __init__(
        self,
        placement: Placement,
        nodes: NodeLookup,
        benchmarks: BenchmarkSource,
        tenants: TenantPods,
        weights: PlacementWeights,
        sink: Malformed,
        on_tenant: Callable[[str, TenantShare], None] = lambda namespace, share: None,
        on_rejections: Callable[[Mapping[str, int]], None] = lambda counts: None,
    ) -> None:
        """``on_rejections``: told each filter call's rejected nodes per reason."""
        self._placement = placement
        self._nodes = nodes
        self._benchmarks = benchmarks
        self._tenants = tenants
        self._weights = weights
        self._sink = sink
        self._parsed = ParsedNodes(sink)
        self._on_tenant = on_tenant
        self._on_rejections = on_rejections

    def use_sources(
        self, nodes: NodeLookup, benchmarks: BenchmarkSource, tenants: TenantPods | None
    ) -> None:
        """Read nodes, benchmarks and tenant pods (unless None) from these (the apiserver's
        informers, once they are set up)."""
        self._nodes = nodes
        self._benchmarks = benchmarks
        if tenants is not None:
            self._tenants = tenants

    def _facts(self, request: ExtenderRequest) -> tuple[list[NodeFacts], list[str]]:
        """The known nodes' facts (objects win over names) and the names not in the cache."""
        if request.node_meta is not None:
            return self._parsed.facts(request.node_meta), []
        return self._nodes.split(request.node_names or [])

    def filter(self, request: ExtenderRequest) -> dict[str, Any]:
        """An ExtenderFilterResult: the passing nodes and each failed node's reason."""
        facts, unknown = self._facts(request)
        outcome = self._placement.filter(request.pod, facts)
        failed = outcome.failed
        for name in unknown:
            failed[name] = UNKNOWN_NODE
        rejections = dict(outcome.rejections)
        if unknown:
            rejections[UNKNOWN_NODE_REASON] = len(unknown)
        self._on_rejections(rejections)
        result: dict[str, Any] = {
            "nodenames": [node.name for node in outcome.passed],
            "failedNodes": failed,
            "failedAndUnresolvableNodes": {},
        }
        if request.nodes is not None:
            passed = {node.name for node in outcome.passed}
            result["nodes"] = {
                "items": [
                    obj
                    for obj, node in zip(request.nodes, facts, strict=True)
                    if node.name in passed
                ]
            }
        return result

    async def prioritize(self, request: ExtenderRequest) -> tuple[list[str], list[int]]:
        """A HostPriorityList as (hosts, scores): every node's score on 0..10 (unknown 0)."""
        facts, unknown = self._facts(request)
        ctx = ScoreContext(await self._benchmarks.results(request.pod, self._sink))
        if self._weights.tenant_fairshare_enabled:
            others = await self._tenants.pods(request.pod.namespace)
            ctx.tenant = tenant_share(request.pod, others, self._weights)
            if ctx.tenant is not None:
                self._on_tenant(request.pod.namespace, ctx.tenant)
        scores = normalise(self._placement.score(request.pod, facts, ctx))
        return [n.name for n in facts] + unknown, scores + [0] * len(unknown)
