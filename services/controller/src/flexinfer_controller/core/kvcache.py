"""Post-reconcile: the KV-cache pressure check, from the engines' own metrics.

Each ready replica's metrics endpoint (the backend's ``metrics_path``) is read for its
KV-cache usage: vLLM's ``vllm:gpu_cache_usage_perc`` (``vllm:kv_cache_usage_perc`` in V1)
or our engine's ``flexinfer_engine_kv_cache_usage_perc``, each a 0-1 share. The fullest
replica is the Model's utilization in ``status.kvCache``; pressure starts at
``spec.kvCache.highWatermark`` (0.85) and ends below ``lowWatermark`` (0.60), so a value
that wavers around one mark does not flap. Every policy observes: the ``Reconfigure``
and ``Evict`` actions are not taken by this controller, and ``lastAction`` says so.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from flexinfer_common.api import Model
from flexinfer_common.api.meta import utcnow
from flexinfer_common.api.status import KVCacheStatus

HIGH_WATERMARK = 0.85
"""The operator's helper default: pressure from 85 % of the KV cache."""
LOW_WATERMARK = 0.60
"""The operator's helper default: pressure ends below 60 %."""
USAGE_METRICS = (
    "vllm:gpu_cache_usage_perc",
    "vllm:kv_cache_usage_perc",
    "flexinfer_engine_kv_cache_usage_perc",
)


class EngineMetrics(Protocol):
    """Reads an engine's KV-cache usage (a 0-1 share) from its metrics endpoint."""

    async def kv_cache_usage(self, url: str) -> float | None:
        """The usage ``url`` (the metrics endpoint) reports; None when it reports none or
        cannot be read now."""


def _ratio(value: float | str | None, default: float) -> float:
    if value is None:
        return default
    try:
        ratio = float(value)
    except ValueError:
        return default
    return ratio / 100 if ratio > 1 else ratio  # "85" meant as a percentage


def assess(
    model: Model, usage: float, previous: KVCacheStatus | None, now: datetime
) -> KVCacheStatus:
    """The new status.kvCache for ``usage``, with the watermarks' hysteresis."""
    spec = model.spec.kv_cache
    high = _ratio(spec.high_watermark if spec else None, HIGH_WATERMARK)
    low = _ratio(spec.low_watermark if spec else None, LOW_WATERMARK)
    was = bool(previous and previous.pressure)
    pressure = usage >= high or (was and usage >= low)
    status = (previous or KVCacheStatus()).model_copy(
        update={"utilization": f"{usage:.2f}", "pressure": pressure}
    )
    if pressure and not was:
        policy = spec.pressure_policy if spec else "Observe"
        action = "Observe" if policy == "Observe" else f"Observe ({policy} is not supported)"
        status = status.model_copy(update={"last_pressure_time": now, "last_action": action})
    return status


class KVCacheCheck:
    """Reads the ready replicas' usage and turns it into status.kvCache."""

    def __init__(self, metrics: EngineMetrics) -> None:
        self._metrics = metrics

    async def check(self, model: Model, urls: Sequence[str]) -> KVCacheStatus | None:
        """status.kvCache from the metrics endpoints ``urls`` (the previous one when none
        answers: a missed scrape is no news)."""
        if not urls:
            return model.status.kv_cache
        readings = await asyncio.gather(*(self._metrics.kv_cache_usage(u) for u in urls))
        found = [r for r in readings if r is not None]
        if not found:
            return model.status.kv_cache
        return assess(model, max(found), model.status.kv_cache, utcnow())


class NoEngineMetrics:
    """Reads nothing: status.kvCache stays as it is."""

    async def kv_cache_usage(self, url: str) -> float | None:
        """None."""
        return None
