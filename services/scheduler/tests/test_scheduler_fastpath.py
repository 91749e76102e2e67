"""The extender's columnar answers against its per-node reference path, byte for byte.

The same random fleets (hostile names, labels and annotations) in one node cache, asked the
same ExtenderArgs by name: an extender whose profile has vectorised plugins (the fast path,
answers written from pre-encoded names) and one whose plugins are wrapped to offer only
their per-node form (the reference, answers from ``json.dumps``) must send the same bytes.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from typing import Any

import pytest

from flexinfer_common.placement import (
    Filter,
    InMemoryBenchmarks,
    InMemoryTenantPods,
    NodeFacts,
    Placement,
    PluginDeps,
    PodFacts,
    ScoreContext,
    Scorer,
    default_placement,
    default_registry,
    keys,
    node_facts,
)
from flexinfer_common.placement.plugins import DEFAULT_FILTERS, DEFAULT_SCORERS
from flexinfer_scheduler.core.extender import Extender
from flexinfer_scheduler.core.nodes import NodeCache
from flexinfer_scheduler.core.protocol import parse_args
from flexinfer_testing.placement_fleets import (
    CLASSES,
    NAMES,
    Sink,
    benchmark_table,
    node_metadata,
    random_weights,
    request_names,
)


class PerNodeFilter:
    """A filter's per-node form alone."""

    def __init__(self, inner: Filter) -> None:
        self._inner = inner

    def reasons(self, pod: PodFacts, nodes: Sequence[NodeFacts]) -> list[str | None]:
        """The wrapped filter's reasons."""
        return self._inner.reasons(pod, nodes)


class PerNodeScorer:
    """A scorer's per-node form alone."""

    def __init__(self, inner: Scorer) -> None:
        self._inner = inner

    def scores(self, pod: PodFacts, nodes: Sequence[NodeFacts], ctx: ScoreContext) -> list[float]:
        """The wrapped scorer's scores."""
        return self._inner.scores(pod, nodes, ctx)


def reference_placement(deps: PluginDeps) -> Placement:
    """The default profile with every plugin reduced to its per-node form."""
    registry = default_registry()
    return Placement(
        [PerNodeFilter(registry.filter(name, deps)) for name in DEFAULT_FILTERS],
        [PerNodeScorer(registry.scorer(name, deps)) for name in DEFAULT_SCORERS],
    )


def pod_object(rng: random.Random) -> dict[str, Any]:
    """A v1.Pod with random (sometimes malformed) placement annotations."""
    annotations = {
        keys.VRAM_ESTIMATE_MB: rng.choice(["3000", "100", "0", "lots", "1e308", "25000.5"]),
        keys.BACKEND: rng.choice(["vllm", "llama.cpp", "sglang", ""]),
        keys.MODEL: rng.choice(["m", "other", ""]),
    }
    gpus = rng.choice(["0", "1", "2", "x"])
    return {
        "metadata": {
            "name": "engine-0",
            "namespace": "ns",
            "labels": {"modeldeployment_cr": "md"} if rng.random() < 0.5 else {},
            "annotations": {k: v for k, v in annotations.items() if rng.random() < 0.85},
        },
        "spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": gpus}}}]},
    }


def extenders(rng: random.Random, size: int) -> tuple[Extender, Extender, list[str]]:
    """The fast and the reference extender over one random fleet, and its node names."""
    sink = Sink()
    names = [f"node-{i:05d}" for i in range(size)] + NAMES
    cache = NodeCache(node_facts(name, *node_metadata(rng), sink) for name in names)
    classes = sorted({node.device_class for name in names if (node := cache.get(name))})
    benchmarks = InMemoryBenchmarks(
        {"ns": {**benchmark_table(rng, "vllm", "m", classes + CLASSES), "junk": "x"}},
        {("ns", "md"): {"tokensPerSecond": rng.choice(["12.5", "n/a", "0"])}},
    )
    weights = random_weights(rng)
    weights.tenant_fairshare_enabled = rng.random() < 0.5
    tenants = InMemoryTenantPods([PodFacts(namespace="ns", name="other", gpu_count=1)])
    deps = PluginDeps(weights=weights)
    built = [
        Extender(placement, cache, benchmarks, tenants, weights, sink)
        for placement in (default_placement(deps), reference_placement(deps))
    ]
    return built[0], built[1], names


@pytest.mark.parametrize("seed", range(6))
async def test_fast_answers_are_the_reference_answers_byte_for_byte(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(25):
        fast, reference, names = extenders(rng, rng.choice([0, 3, 50, 400]))
        body = {"pod": pod_object(rng), "nodenames": request_names(rng, names)}
        request = parse_args(json.loads(json.dumps(body)), Sink())
        answer = fast.filter(request)
        assert answer == reference.filter(request)
        decoded = json.loads(answer)
        assert len(decoded["nodenames"]) + len(decoded["failedNodes"]) >= len(
            set(body["nodenames"])
        )
        scores = await fast.prioritize(request)
        assert scores == await reference.prioritize(request)
        assert [entry["host"] for entry in json.loads(scores)] == [
            n for n in body["nodenames"] if n != "not-a-node"
        ] + [n for n in body["nodenames"] if n == "not-a-node"]
