"""Random fleets and pods for placement's differential tests (core and scheduler).

Labels and annotations are drawn from plausible values and from hostile ones (empty,
padded, NaN, infinities, denormals, non-ASCII digits, quotes), so the per-node reference
and the columnar fast path are compared where parsing is least forgiving.
"""

from __future__ import annotations

import math
import random

from flexinfer_common.placement import (
    BenchmarkResults,
    Malformed,
    NodeFacts,
    PlacementWeights,
    PodFacts,
    benchmark_key,
    keys,
    node_facts,
)

VENDORS = ["NVIDIA", "nvidia", " AMD ", "amd", "Intel", "", "  ", "Ünïcødé", 'q"uote']
ARCHS = ["sm_89", "SM_60", "sm_70", "sm_61", "gfx942", "gfx906", "gfx1100", "", "sm_", "x y"]
VRAMS = ["24Gi", "80G", "16000Mi", "0", "-1", "lots", "", "1e400", "24 Gi"]
COUNTS = ["1", "2", "8", "0", "-1", "x", " 2", "٣"]
NUMBERS = [
    *("", " ", "n/a", "NaN", "inf", "-inf", "-1", "1e308", "1e-320", "0", "-0", "12"),
    *(" 42 ", "3.5", "0x10", "1_000", "0.86", "0.85", "0.851", "1", "99999999999999999999"),
]
CLASSES = ["nvidia-l4", "nvidia-h100", "amd-mi300x", " ", "", "weird/class"]
NAMES = ["n", "nøde", 'q"uote', "tab\tname", "back\\slash", "🚀", "node-00001", "\x00"]
"""Node names beyond ``node-NNNNN``: every one must come back in answers as sent."""


class Sink:
    """Collects malformed reports."""

    def __init__(self) -> None:
        self.reports: list[tuple[str, str]] = []

    def report(self, key: str, value: str) -> None:
        """Keep it."""
        self.reports.append((key, value))


def number_text(rng: random.Random, high: float) -> str:
    """Mostly a plausible number up to ``high``, sometimes a hostile one."""
    if rng.random() < 0.25:
        return rng.choice(NUMBERS)
    return rng.choice([f"{rng.uniform(0, high):.3f}", str(rng.randrange(int(high) + 1))])


def node_metadata(rng: random.Random) -> tuple[dict[str, str], dict[str, str]]:
    """A node's labels and annotations, each present or not, often malformed."""
    labels: dict[str, str] = {}
    for key, values in (
        (keys.GPU_VENDOR, VENDORS),
        (keys.GPU_ARCH, ARCHS),
        (keys.GPU_VRAM, VRAMS),
        (keys.GPU_COUNT, COUNTS),
    ):
        if rng.random() < 0.8:
            labels[key] = rng.choice(values)
    if rng.random() < 0.3:
        labels[keys.GPU_DEVICE_CLASS] = rng.choice(CLASSES)
    highs = {keys.GPU_FREE_MEMORY: 40000, keys.GPU_UTIL: 100, keys.COST: 5, keys.KV_CACHE_USAGE: 1}
    annotations = {
        key: number_text(rng, high) for key, high in highs.items() if rng.random() < 0.85
    }
    return labels, annotations


def parsed_node(rng: random.Random, name: str, sink: Malformed | None = None) -> NodeFacts:
    """A node as the informer parses it, from random (often malformed) labels."""
    labels, annotations = node_metadata(rng)
    return node_facts(name, labels, annotations, sink or Sink())


def extreme_node(rng: random.Random, name: str) -> NodeFacts:
    """Facts built directly (the core's public type) with values no parse gives."""
    extremes = [math.nan, math.inf, -math.inf, 1e308, -0.0, 5e-324, 0.0, 2.5]
    return NodeFacts(
        name,
        vendor=rng.choice(["nvidia", "amd", "", None]),
        arch=rng.choice(["sm_60", "sm_90", "gfx906", None]),
        gpu_count=rng.choice([1, 2]),
        vram_per_gpu_mb=rng.choice([None, 24576.0, 0.0]),
        free_mb=rng.choice([None, *extremes]),
        util=rng.choice(extremes),
        cost=rng.choice(extremes),
        cache_usage=rng.choice(extremes),
        device_class=rng.choice(CLASSES),
    )


def random_pod(rng: random.Random) -> PodFacts:
    """A pod with a random backend, model, estimate and GPU count."""
    return PodFacts(
        namespace="ns",
        name="p",
        labels={keys.DEPLOYMENT_LABEL: "md"} if rng.random() < 0.3 else {},
        backend=rng.choice([None, "vllm", "llamacpp", "sglang"]),
        model=rng.choice([None, "m", "other"]),
        vram_estimate_mb=rng.choice([None, 0.0, 100.0, 3000.0, rng.uniform(0, 40000), 1e308]),
        gpu_count=rng.choice([0, 1, 2, 4]),
    )


def benchmark_table(
    rng: random.Random, backend: str | None, model: str | None, classes: list[str]
) -> dict[str, str]:
    """A global results table over some of ``classes``, some of its values malformed."""
    if not (backend and model):
        return {}
    return {
        benchmark_key(backend, model, dc): number_text(rng, 300)
        for dc in classes
        if rng.random() < 0.5
    }


def random_benchmarks(rng: random.Random, pod: PodFacts, classes: list[str]) -> BenchmarkResults:
    """``benchmark_table`` and maybe a deployment's TPS, as one decision's results."""
    data = benchmark_table(rng, pod.backend, pod.model, classes)
    return BenchmarkResults(data, rng.choice([None, 0.0, 55.5, 1e308]), Sink())


def random_weights(rng: random.Random) -> PlacementWeights:
    """Weights from the defaults to the absurd."""
    pick = [0.0, 0.1, 0.7, 10.0, 1e300, rng.uniform(0, 20)]
    return PlacementWeights(
        tps_weight=rng.choice(pick),
        util_weight=rng.choice(pick),
        cost_weight=rng.choice(pick),
        cache_weight=rng.choice(pick),
        vram_free_weight=rng.choice(pick),
    )


def request_names(rng: random.Random, held: list[str]) -> list[str]:
    """A request's names: a shuffled sample of ``held``, maybe a duplicate and an unknown."""
    names = rng.sample(held, k=rng.randrange(len(held) + 1))
    if names and rng.random() < 0.3:
        names.insert(rng.randrange(len(names)), rng.choice(names))
    if rng.random() < 0.3:
        names.insert(rng.randrange(len(names) + 1), "not-a-node")
    return names
