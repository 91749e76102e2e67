"""Benchmarked tokens/s: where the TPS scorer looks, in the seed's order.

1. the global results ConfigMap (``flexinfer-benchmark-results``), key
   ``benchmark_key(backend, model, device_class)``;
2. the pod's per-deployment ConfigMap ``<deployment>-benchmark-results``, key
   ``tokensPerSecond``;
3. 0.0.

A ``BenchmarkSource`` reads both for one pod (once per decision, not per node); the TPS
benchmarker writes them with the same ``benchmark_key``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from flexinfer_common.placement.facts import IgnoreMalformed, Malformed, PodFacts, number

GLOBAL_RESULTS_CONFIGMAP = "flexinfer-benchmark-results"
DEPLOYMENT_RESULTS_SUFFIX = "-benchmark-results"
TPS_KEY = "tokensPerSecond"


def benchmark_key(backend: str, model: str, device_class: str) -> str:
    """The global ConfigMap's key: ``bench_`` + the first 16 bytes of
    SHA256(backend|model|deviceClass) in hex (a valid ConfigMap key of any model name)."""
    digest = hashlib.sha256(f"{backend}|{model}|{device_class}".encode()).digest()
    return "bench_" + digest[:16].hex()


def deployment_configmap(deployment: str) -> str:
    """The per-deployment results ConfigMap's name."""
    return deployment + DEPLOYMENT_RESULTS_SUFFIX


@dataclass(slots=True)
class BenchmarkResults:
    """What one decision knows about throughput: the global table and the deployment's TPS."""

    global_data: Mapping[str, str] = field(default_factory=dict)
    deployment_tps: float | None = None
    sink: Malformed = field(default_factory=IgnoreMalformed)
    _memo: dict[str, float] = field(default_factory=dict)
    """Device class -> TPS, for as long as this object lives: one decision, or (the
    scheduler's ConfigMap informer) until a benchmark ConfigMap changes. Keyed by the device
    class alone, so one object serves one (backend, model, deployment)."""

    def tps(self, backend: str | None, model: str | None, device_class: str) -> float:
        """Tokens/s of ``model`` on ``backend`` on this device class; 0.0 when unknown."""
        cached = self._memo.get(device_class)
        if cached is not None:
            return cached
        found: float | None = None
        if backend and model and self.global_data:
            key = benchmark_key(backend, model, device_class)
            found = number(self.global_data, key, self.sink)
        if found is None:
            found = self.deployment_tps if self.deployment_tps is not None else 0.0
        self._memo[device_class] = found
        return found


class BenchmarkSource(Protocol):
    """Reads the benchmark ConfigMaps for one pod."""

    async def results(self, pod: PodFacts, sink: Malformed) -> BenchmarkResults:
        """The global table (empty when missing) and the deployment's TPS (None if none)."""


class InMemoryBenchmarks:
    """Benchmark ConfigMaps as dicts: by namespace, the global data and per-deployment data."""

    def __init__(
        self,
        global_data: Mapping[str, Mapping[str, str]] | None = None,
        deployments: Mapping[tuple[str, str], Mapping[str, str]] | None = None,
    ) -> None:
        self._global = dict(global_data or {})
        self._deployments = dict(deployments or {})

    async def results(self, pod: PodFacts, sink: Malformed) -> BenchmarkResults:
        """The pod namespace's tables."""
        data: Mapping[str, str] = {}
        if pod.backend and pod.model:
            data = self._global.get(pod.namespace, {})
        tps = None
        if pod.deployment:
            deployment = self._deployments.get((pod.namespace, pod.deployment), {})
            tps = number(deployment, TPS_KEY, sink)
        return BenchmarkResults(data, tps, sink)
