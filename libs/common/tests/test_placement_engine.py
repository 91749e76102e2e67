"""The seed's filters and score, pinned with hand-computed cases."""

from __future__ import annotations

import pytest

from flexinfer_common.placement import (
    BenchmarkResults,
    NodeFacts,
    PlacementWeights,
    PluginDeps,
    PodFacts,
    ScoreContext,
    TenantShare,
    benchmark_key,
    default_placement,
    default_registry,
    normalise,
)
from flexinfer_common.placement.plugins import VendorLabelFilter

GPU = NodeFacts("gpu", vendor="nvidia", arch="sm_89", vram_per_gpu_mb=24576.0)


def node(name: str, **kwargs: object) -> NodeFacts:
    """A labelled NVIDIA node with the given facts."""
    base: dict[str, object] = {"vendor": "nvidia", "arch": "sm_89", "vram_per_gpu_mb": 24576.0}
    base.update(kwargs)
    return NodeFacts(name, **base)  # type: ignore[arg-type]


def test_the_filters_reasons_start_with_the_seeds_text() -> None:
    placement = default_placement()
    pod = PodFacts(backend="vllm", vram_estimate_mb=10000, gpu_count=2)
    nodes = [
        NodeFacts("no-label"),
        node("small", free_mb=15000.0),
        node("old", arch="sm_60", free_mb=30000.0),
        node("fits", free_mb=20000.0),
        node("unknown-free"),
    ]
    outcome = placement.filter(pod, nodes)
    assert [n.name for n in outcome.passed] == ["fits", "unknown-free"]
    assert outcome.failed == {
        "no-label": "No vendor label",
        "small": "Insufficient VRAM: 15000 MB free, 20000 MB needed (10000 MB x 2 GPUs)",
        "old": "Unsupported arch: backend vllm does not run on nvidia sm_60",
    }


def test_checks_two_and_three_need_their_inputs() -> None:
    placement = default_placement()
    # No estimate, no backend: only the vendor label is checked.
    outcome = placement.filter(PodFacts(), [node("a", free_mb=0.0, arch="sm_30")])
    assert outcome.failed == {}
    # An estimate and no GPU resource still needs one GPU's worth.
    small = placement.filter(PodFacts(vram_estimate_mb=100), [node("b", free_mb=99.0)])
    assert small.failed == {"b": "Insufficient VRAM: 99 MB free, 100 MB needed (100 MB x 1 GPU)"}
    # Exactly enough passes.
    assert placement.filter(PodFacts(vram_estimate_mb=100), [node("c", free_mb=100.0)]).passed


@pytest.mark.parametrize(
    ("vendor", "arch", "ok"),
    [
        ("nvidia", "sm_70", True),
        ("nvidia", "sm_61", False),
        ("nvidia", "ampere", True),
        ("amd", "gfx942", True),
        ("amd", "gfx1100", True),
        ("amd", "gfx906", False),
        ("intel", "xe", True),
    ],
)
def test_vllm_architectures(vendor: str, arch: str, ok: bool) -> None:
    outcome = default_placement().filter(
        PodFacts(backend="vllm"), [node("n", vendor=vendor, arch=arch)]
    )
    assert bool(outcome.passed) is ok


def test_a_backend_without_documented_limits_runs_anywhere() -> None:
    outcome = default_placement().filter(PodFacts(backend="llamacpp"), [node("n", arch="sm_35")])
    assert outcome.passed


def test_the_score_by_hand() -> None:
    pod = PodFacts(backend="vllm", model="m")
    n = node("n", util=50.0, cost=2.0, cache_usage=0.9, free_mb=12000.0, device_class="dc")
    ctx = ScoreContext(BenchmarkResults({benchmark_key("vllm", "m", "dc"): "100"}))
    # 100x0.7 - 50x0.2 - 2x0.1 - 0.9x0.3 + (12000/24576)x10 - (0.9-0.85)x20 + 0
    expected = 70 - 10 - 0.2 - 0.27 + 4.8828125 - 1.0
    assert default_placement().score(pod, [n], ctx) == [pytest.approx(expected)]


def test_the_score_with_tenant_and_custom_weights() -> None:
    weights = PlacementWeights(
        tps_weight=1, util_weight=0, cost_weight=1, cache_weight=0, vram_free_weight=0
    )
    placement = default_placement(PluginDeps(weights=weights))
    ctx = ScoreContext(BenchmarkResults(deployment_tps=40.0), TenantShare("t", 3, 0.75, 1.25))
    assert placement.score(PodFacts(), [node("n", cost=5.0)], ctx) == [40 - 5 + 1.25]


@pytest.mark.parametrize(
    ("cache", "penalty"), [(0.0, 0.0), (0.85, 0.0), (0.9, 1.0), (1.0, 3.0), (1.2, 7.0)]
)
def test_kv_pressure_penalty(cache: float, penalty: float) -> None:
    weights = PlacementWeights(cache_weight=0, vram_free_weight=0)
    placement = default_placement(PluginDeps(weights=weights))
    score = placement.score(PodFacts(), [node("n", cache_usage=cache)], ScoreContext())
    assert score == [pytest.approx(-penalty)]


def test_a_bare_node_scores_zero() -> None:
    assert default_placement().score(PodFacts(), [NodeFacts("n")], ScoreContext()) == [0.0]


def test_normalise_onto_zero_to_ten() -> None:
    assert normalise([]) == []
    assert normalise([3.0, 3.0]) == [10, 10]
    assert normalise([-5.0, 0.0, 5.0]) == [0, 5, 10]
    assert normalise([0.0, 0.25, 1.0]) == [0, 3, 10]


def test_best_picks_the_top_score_then_the_name() -> None:
    placement = default_placement()
    pod = PodFacts(vram_estimate_mb=1000)
    nodes = [node("b", free_mb=20000.0), node("a", free_mb=20000.0), node("c", free_mb=10.0)]
    chosen, outcome = placement.best(pod, nodes, ScoreContext())
    assert chosen is not None
    assert chosen.name == "a"
    assert "c" in outcome.failed
    none, _ = placement.best(pod, [NodeFacts("x")], ScoreContext())
    assert none is None


def test_the_registry_builds_by_name_and_refuses_unknowns_and_duplicates() -> None:
    registry = default_registry()
    assert isinstance(registry.filter("gpu-vendor", PluginDeps()), VendorLabelFilter)
    with pytest.raises(KeyError, match="unknown filter 'nope'"):
        registry.filter("nope", PluginDeps())
    with pytest.raises(KeyError, match="unknown scorer"):
        registry.scorer("nope", PluginDeps())
    with pytest.raises(ValueError, match="already registered"):
        registry.register_filter("gpu-vendor", lambda deps: VendorLabelFilter())
    only_vendor = default_placement(registry=registry, filters=["gpu-vendor"], scorers=[])
    assert only_vendor.filter(PodFacts(vram_estimate_mb=1), [node("n", free_mb=0.0)]).passed
    assert only_vendor.score(PodFacts(), [GPU], ScoreContext()) == [0.0]


def test_weights_from_the_seeds_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    defaults = PlacementWeights()
    assert (defaults.tps_weight, defaults.util_weight, defaults.cost_weight) == (0.7, 0.2, 0.1)
    assert (defaults.cache_weight, defaults.vram_free_weight) == (0.3, 10.0)
    assert defaults.tenant_fairshare_weight == 5.0
    monkeypatch.setenv("SCHED_TPS_WEIGHT", "2.5")
    monkeypatch.setenv("SCHED_TENANT_QUOTAS", '{"a": 4}')
    weights = PlacementWeights()
    assert weights.tps_weight == 2.5
    assert (weights.quota("a"), weights.quota("b")) == (4, 1.0)
