"""TPS lookup order and tenant fair share."""

from __future__ import annotations

import hashlib

from flexinfer_common.placement import (
    BenchmarkResults,
    InMemoryBenchmarks,
    InMemoryTenantPods,
    PlacementWeights,
    PodFacts,
    benchmark_key,
    tenant_share,
)


class Sink:
    """Collects malformed reports."""

    def __init__(self) -> None:
        self.reports: list[tuple[str, str]] = []

    def report(self, key: str, value: str) -> None:
        self.reports.append((key, value))


def test_benchmark_key_is_sha256_of_backend_model_device_class() -> None:
    digest = hashlib.sha256(b"vllm|m|dc").hexdigest()
    assert benchmark_key("vllm", "m", "dc") == "bench_" + digest[:32]


def test_lookup_order_global_then_deployment_then_zero() -> None:
    key = benchmark_key("vllm", "m", "a100")
    results = BenchmarkResults({key: "90.5"}, deployment_tps=10.0)
    assert results.tps("vllm", "m", "a100") == 90.5
    assert results.tps("vllm", "m", "t4") == 10.0
    assert BenchmarkResults().tps("vllm", "m", "t4") == 0.0
    # Without a backend or model the global table cannot be keyed.
    assert BenchmarkResults({key: "90.5"}).tps(None, "m", "a100") == 0.0


def test_a_malformed_global_value_falls_through_and_is_reported() -> None:
    sink = Sink()
    key = benchmark_key("vllm", "m", "dc")
    results = BenchmarkResults({key: "fast"}, deployment_tps=7.0, sink=sink)
    assert results.tps("vllm", "m", "dc") == 7.0
    assert sink.reports == [(key, "fast")]


async def test_in_memory_benchmarks_read_the_pods_namespace() -> None:
    key = benchmark_key("vllm", "m", "dc")
    source = InMemoryBenchmarks(
        {"ns": {key: "50"}},
        {("ns", "md"): {"tokensPerSecond": "12"}, ("ns", "bad"): {"tokensPerSecond": "?"}},
    )
    sink = Sink()
    pod = PodFacts(namespace="ns", backend="vllm", model="m", labels={"modeldeployment_cr": "md"})
    results = await source.results(pod, sink)
    assert results.tps("vllm", "m", "dc") == 50
    assert results.tps("vllm", "m", "x") == 12
    other = await source.results(PodFacts(namespace="other", model="md"), sink)
    assert other.tps(None, "md", "dc") == 0.0
    bad = await source.results(PodFacts(namespace="ns", model="bad"), sink)
    assert bad.deployment_tps is None
    assert sink.reports == [("tokensPerSecond", "?")]


async def test_tenant_share_counts_live_pods_of_the_tenant() -> None:
    pods = InMemoryTenantPods(
        [
            PodFacts(namespace="ns", name="a", gpu_count=2),
            PodFacts(namespace="ns", name="done", gpu_count=4, terminal=True),
            PodFacts(namespace="ns", name="me", gpu_count=9),  # the pod itself, listed
            PodFacts(namespace="ns", name="other", gpu_count=1, labels={"team": "b"}),
            PodFacts(namespace="elsewhere", name="x", gpu_count=8),
        ]
    )
    weights = PlacementWeights(tenant_fairshare_budget_gpus=4.0)
    me = PodFacts(namespace="ns", name="me", gpu_count=1)
    share = tenant_share(me, await pods.pods("ns"), weights)
    # used = 1 (me) + 2 (a) + 1 (other: no team label key set, so its tenant is ns) = 4
    assert share is not None
    assert share.tenant == "ns"
    assert (share.used_gpus, share.usage_ratio, share.adjustment) == (4.0, 1.0, 0.0)
    by_label = PlacementWeights(tenant_label_key="team", tenant_quotas={"b": 2.0})
    b_pod = PodFacts(namespace="ns", name="new", gpu_count=0, labels={"team": "b"})
    b_share = tenant_share(b_pod, await pods.pods("ns"), by_label)
    assert b_share is not None
    assert b_share.tenant == "b"
    assert (b_share.used_gpus, b_share.adjustment) == (1.0, 2.5)  # (1 - 1/2) x 5
    over = tenant_share(PodFacts(namespace="ns", gpu_count=3), [], PlacementWeights())
    assert over is not None
    assert over.adjustment == -10.0
    no_quota = PlacementWeights(tenant_fairshare_budget_gpus=0)
    assert tenant_share(me, [], no_quota) is None
