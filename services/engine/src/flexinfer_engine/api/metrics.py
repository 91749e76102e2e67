"""Engine metrics on the app's own Prometheus registry."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from flexinfer_engine.core.runner import Hooks

if TYPE_CHECKING:
    from flexinfer_engine.compile_cache import CompileReport
    from flexinfer_engine.core.engine import LoadInfo


def engine_hooks(registry: CollectorRegistry) -> Hooks:
    """Runner hooks that count generated tokens and time the first token."""
    tokens = Counter("flexinfer_engine_generated_tokens", "Tokens generated", registry=registry)
    ttft = Histogram(
        "flexinfer_engine_time_to_first_token_seconds",
        "Seconds from request admission to its first generated token (queueing included)",
        buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
        registry=registry,
    )
    return Hooks(on_tokens=tokens.inc, on_first_token=ttft.observe)


def kv_cache_gauge(
    registry: CollectorRegistry, positions: Callable[[], int], capacity: int
) -> None:
    """``flexinfer_engine_kv_cache_usage_perc``: the share (0-1, as vLLM's
    ``vllm:gpu_cache_usage_perc``) of the KV-cache positions the engine admits, which is
    ``max_concurrent_generations`` sequences of the model's context length."""
    gauge = Gauge(
        "flexinfer_engine_kv_cache_usage_perc",
        "Share of the admitted KV-cache positions the running generations fill (0-1)",
        registry=registry,
    )
    gauge.set_function(lambda: min(1.0, positions() / capacity))


def request_gauges(
    registry: CollectorRegistry, running: Callable[[], int], waiting: Callable[[], int]
) -> None:
    """``flexinfer_engine_num_requests_running`` and ``..._waiting``, as vLLM's
    ``vllm:num_requests_running`` and ``vllm:num_requests_waiting``: the controller drains
    an engine it preempts until both are 0."""
    Gauge(
        "flexinfer_engine_num_requests_running",
        "Requests generating now",
        registry=registry,
    ).set_function(running)
    Gauge(
        "flexinfer_engine_num_requests_waiting",
        "Requests admitted and waiting for a generation slot",
        registry=registry,
    ).set_function(waiting)


def sleep_gauge(registry: CollectorRegistry, level: Callable[[], int]) -> None:
    """``flexinfer_engine_sleep_level``: 0 awake, 1 or 2 asleep at that level (as vLLM's
    ``vllm:engine_sleep_state`` tells a sleeping engine apart from an idle one)."""
    Gauge(
        "flexinfer_engine_sleep_level",
        "Sleep level of the engine: 0 awake, 1 weights offloaded, 2 weights dropped",
        registry=registry,
    ).set_function(level)


def weights_gauge(registry: CollectorRegistry, load: Callable[[], LoadInfo | None]) -> None:
    """``flexinfer_engine_weights_load_seconds{strategy}``: how long the last weight load
    took, labelled with the strategy that produced the weights (``rdma`` from a peer,
    ``gds``/``default`` from files); absent before the first load."""
    registry.register(_WeightsCollector(load))


def compile_gauge(registry: CollectorRegistry, report: Callable[[], CompileReport | None]) -> None:
    """``flexinfer_engine_compile_seconds{source}``: how long compile mode's compile and
    warm-up took, labelled with where its cache came from (``peer`` fetched, ``local``);
    absent before the compile."""
    registry.register(_CompileCollector(report))


class _CompileCollector(Collector):
    def __init__(self, report: Callable[[], CompileReport | None]) -> None:
        self.report = report

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "flexinfer_engine_compile_seconds",
            "Seconds compile mode's compile and warm-up took, by where its cache came from",
            labels=["source"],
        )
        report = self.report()
        if report is not None:
            family.add_metric([report.source], report.seconds)
        yield family


class _WeightsCollector(Collector):
    def __init__(self, load: Callable[[], LoadInfo | None]) -> None:
        self.load = load

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "flexinfer_engine_weights_load_seconds",
            "Seconds the last weight load took, by the strategy that loaded the weights",
            labels=["strategy"],
        )
        info = self.load()
        if info is not None:
            family.add_metric([info.strategy], info.seconds)
        yield family
