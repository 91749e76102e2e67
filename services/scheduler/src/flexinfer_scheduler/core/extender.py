"""The extender's two verbs over the placement core: filter and prioritize.

Node names (kube-scheduler's ``nodeCacheCapable`` mode, the usual case) are decided over
the node cache's columns by the profile's vectorised plugins, and the answer is written
from each node's pre-encoded JSON name. Node objects, and a profile with a plugin that has
no vectorised form, take the per-node reference path; both give the same answers.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from json.encoder import encode_basestring_ascii
from typing import Any

import numpy as np

from flexinfer_common.placement import (
    BenchmarkSource,
    Malformed,
    NodeFacts,
    Placement,
    PlacementWeights,
    PodFacts,
    ScoreContext,
    TenantPods,
    TenantShare,
    normalise,
    normalise_columns,
    tenant_share,
)
from flexinfer_common.placement.columns import Rows
from flexinfer_scheduler.core.nodes import NodeLookup
from flexinfer_scheduler.core.parsed import ParsedNodes
from flexinfer_scheduler.core.protocol import (
    ExtenderRequest,
    filter_result,
    host_priority_list,
    host_priority_list_json,
)

UNKNOWN_NODE = "Unknown node: not in the extender's node cache"

UNKNOWN_NODE_REASON = "UnknownNode"
"""The rejection reason (a metric label) of a node the scheduler has no facts about."""


class Extender:
    """Answers ExtenderArgs with ExtenderFilterResult and HostPriorityList bodies (JSON)."""

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
        self._columnar = placement.columnar()
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
        table = self._nodes.columns
        rows, unknown = table.rows(request.node_names or [])
        return table.facts_of(rows), unknown

    def _rejected(self, rejections: Mapping[str, int], unknown: list[str]) -> None:
        """Tell ``on_rejections`` the nodes one filter call rejected, per reason."""
        counts = dict(rejections)
        if unknown:
            counts[UNKNOWN_NODE_REASON] = len(unknown)
        self._on_rejections(counts)

    def filter(self, request: ExtenderRequest) -> bytes:
        """An ExtenderFilterResult: the passing nodes and each failed node's reason."""
        if request.node_meta is None and self._columnar is not None:
            return self._filter_columns(request)
        facts, unknown = self._facts(request)
        outcome = self._placement.filter(request.pod, facts)
        for name in unknown:
            outcome.failed[name] = UNKNOWN_NODE
        self._rejected(outcome.rejections, unknown)
        result: dict[str, Any] = {
            "nodenames": [node.name for node in outcome.passed],
            "failedNodes": outcome.failed,
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
        return json.dumps(result, separators=(",", ":")).encode()

    def _filter_columns(self, request: ExtenderRequest) -> bytes:
        """``filter`` by node names over the node cache's columns."""
        table = self._nodes.columns
        rows, unknown = table.rows(request.node_names or [])
        columns = self._columnar.filter(request.pod, table, rows)  # type: ignore[union-attr]
        self._rejected(columns.rejections, unknown)
        failed = columns.failed_rows
        if _distinct(failed, len(table.name)):
            # The usual case: each rejected node once, named by its pre-encoded JSON name.
            names, reasons = table.name_json[failed].tolist(), columns.failed_reasons
        else:  # a name asked twice is answered once, where it first failed
            by_name = columns.failed(table)
            names, reasons = list(map(encode_basestring_ascii, by_name)), list(by_name.values())
        if unknown:
            unique = dict.fromkeys(unknown)
            names += map(encode_basestring_ascii, unique)
            reasons += [UNKNOWN_NODE] * len(unique)
        return filter_result(table.name_json[columns.passed].tolist(), names, reasons)

    async def prioritize(self, request: ExtenderRequest) -> bytes:
        """A HostPriorityList: every node's score on 0..10 (unknown nodes 0)."""
        # Everything awaited comes first: the rows read below are decided without a pause.
        ctx = await self._context(request.pod)
        if request.node_meta is None and self._columnar is not None:
            table = self._nodes.columns
            rows, unknown = table.rows(request.node_names or [])
            scores = normalise_columns(self._columnar.score(request.pod, table, rows, ctx))
            hosts = table.name_json[rows].tolist()
            if unknown:
                hosts += map(encode_basestring_ascii, unknown)
                scores += [0] * len(unknown)
            return host_priority_list_json(hosts, scores)
        facts, unknown = self._facts(request)
        scores = normalise(self._placement.score(request.pod, facts, ctx))
        return host_priority_list([n.name for n in facts] + unknown, scores + [0] * len(unknown))

    async def _context(self, pod: PodFacts) -> ScoreContext:
        ctx = ScoreContext(await self._benchmarks.results(pod, self._sink))
        if self._weights.tenant_fairshare_enabled:
            others = await self._tenants.pods(pod.namespace)
            ctx.tenant = tenant_share(pod, others, self._weights)
            if ctx.tenant is not None:
                self._on_tenant(pod.namespace, ctx.tenant)
        return ctx


def _distinct(rows: Rows, size: int) -> bool:
    """Whether no row repeats (a mask over the table: a few times cheaper than np.unique)."""
    seen = np.zeros(size, dtype=np.bool_)
    seen[rows] = True
    return int(np.count_nonzero(seen)) == len(rows)
