"""Nodes and pods as the plain facts placement needs, parsed once from labels and annotations.

A value that does not parse is treated as absent and reported to a ``Malformed`` sink (the
scheduler counts them in a warning metric): a node agent writing ``"n/a"`` must never make
placement fail. Parsing happens when a node enters the node cache, not per request.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from flexinfer_common.backends import alias_table
from flexinfer_common.placement import keys
from flexinfer_common.quantity import quantity_mb

_TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


class Malformed(Protocol):
    """Where a value that does not parse is reported (then treated as absent)."""

    def report(self, key: str, value: str) -> None:
        """``key`` carried ``value``, which is not what the key means."""


class IgnoreMalformed:
    """A sink that drops reports (callers that count nothing)."""

    def report(self, key: str, value: str) -> None:
        """Nothing."""


@dataclass(frozen=True, slots=True)
class NodeFacts:
    """One node as placement sees it."""

    name: str
    vendor: str | None = None
    """Lower case; None without a (non-empty) ``flexinfer.ai/gpu.vendor`` label."""
    arch: str | None = None
    gpu_count: int = 1
    vram_per_gpu_mb: float | None = None
    free_mb: float | None = None
    """``flexinfer.ai/gpu-free-memory``; None when absent or malformed."""
    util: float = 0.0
    cost: float = 0.0
    cache_usage: float = 0.0
    device_class: str = ""
    """The benchmark key's device class (``device_class``)."""
    free_ratio: float = field(init=False, repr=False, compare=False)
    """Free VRAM over total VRAM, clamped to 0..1; 0 when either is unknown. Derived once
    here, not per decision: the free-VRAM scorer reads it for every node of every request."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "free_ratio", _free_ratio(self))


def _free_ratio(node: NodeFacts) -> float:
    if node.free_mb is None or node.vram_per_gpu_mb is None:
        return 0.0
    total = node.vram_per_gpu_mb * node.gpu_count
    if total <= 0:
        return 0.0
    return min(max(node.free_mb / total, 0.0), 1.0)


@dataclass(frozen=True, slots=True)
class PodFacts:
    """The pod being placed (or one already running, for tenant usage)."""

    namespace: str = "default"
    name: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    backend: str | None = None
    """Canonical backend name (aliases resolved)."""
    model: str | None = None
    vram_estimate_mb: float | None = None
    gpu_count: int = 0
    """GPUs the pod's containers request (``nvidia.com/gpu``, ``amd.com/gpu``, ...)."""
    terminal: bool = False
    """Succeeded or Failed: holds no GPU any more."""

    @property
    def deployment(self) -> str | None:
        """The name of the per-deployment ``<name>-benchmark-results`` ConfigMap's owner."""
        return self.labels.get(keys.DEPLOYMENT_LABEL) or self.model

    def tenant(self, label_key: str | None) -> str:
        """The pod's tenant: the value of ``label_key`` when set, else its namespace."""
        if label_key:
            value = self.labels.get(label_key, "").strip()
            if value:
                return value
        return self.namespace


def number(
    values: Mapping[str, str], key: str, sink: Malformed, *, minimum: float = 0.0
) -> float | None:
    """``values[key]`` as a finite float >= ``minimum``; None when absent or malformed."""
    raw = values.get(key)
    if raw is None or not raw.strip():
        return None
    try:
        parsed = float(raw.strip())
    except ValueError:
        parsed = math.nan
    if not math.isfinite(parsed) or parsed < minimum:
        sink.report(key, raw)
        return None
    return parsed


def _count(labels: Mapping[str, str], sink: Malformed) -> int:
    raw = labels.get(keys.GPU_COUNT)
    if raw is None:
        return 1
    if raw.strip().isdigit() and int(raw) > 0:
        return int(raw)
    sink.report(keys.GPU_COUNT, raw)
    return 1


def _vram(labels: Mapping[str, str], sink: Malformed) -> float | None:
    raw = labels.get(keys.GPU_VRAM)
    if raw is None:
        return None
    parsed = quantity_mb(raw)
    if parsed is None or parsed <= 0:
        sink.report(keys.GPU_VRAM, raw)
        return None
    return parsed


def device_class(labels: Mapping[str, str]) -> str:
    """The device class a benchmark result is keyed by: the agent's device-class label.

    Nodes without one (labelled by hand, or GPUs declared to the local runtime) are keyed
    by their GPU labels verbatim instead, so equal hardware still shares one result.
    """
    named = labels.get(keys.GPU_DEVICE_CLASS, "").strip()
    if named:
        return named
    return (
        f"vendor={labels.get(keys.GPU_VENDOR, '')},arch={labels.get(keys.GPU_ARCH, '')},"
        f"vram={labels.get(keys.GPU_VRAM, '')},count={labels.get(keys.GPU_COUNT, '')},"
        f"int4={labels.get(keys.GPU_INT4, '')}"
    )


def node_facts(
    name: str, labels: Mapping[str, str], annotations: Mapping[str, str], sink: Malformed
) -> NodeFacts:
    """A node's facts from its labels and annotations; malformed values reported, dropped."""
    vendor = labels.get(keys.GPU_VENDOR, "").strip().lower() or None
    arch = labels.get(keys.GPU_ARCH, "").strip().lower() or None
    return NodeFacts(
        name=name,
        vendor=vendor,
        arch=arch,
        gpu_count=_count(labels, sink),
        vram_per_gpu_mb=_vram(labels, sink),
        free_mb=number(annotations, keys.GPU_FREE_MEMORY, sink),
        util=number(annotations, keys.GPU_UTIL, sink) or 0.0,
        cost=number(annotations, keys.COST, sink) or 0.0,
        cache_usage=number(annotations, keys.KV_CACHE_USAGE, sink) or 0.0,
        device_class=device_class(labels),
    )


def canonical_backend(name: str | None) -> str | None:
    """The canonical backend for a name or alias (``llama.cpp`` -> ``llamacpp``)."""
    if name is None or not name.strip():
        return None
    lowered = name.strip().lower()
    return alias_table().get(lowered, lowered)


def _gpus(resources: Mapping[str, str], sink: Malformed) -> int:
    total = 0
    for key in keys.GPU_RESOURCES:
        raw = resources.get(key)
        if raw is None:
            continue
        if raw.strip().isdigit():
            total += int(raw)
        else:
            sink.report(key, raw)
    return total


def requested_gpus(
    containers: Sequence[tuple[Mapping[str, str], Mapping[str, str]]], sink: Malformed
) -> int:
    """GPUs a pod asks for: each container's (limits, requests), limits winning per container."""
    total = 0
    for limits, requests in containers:
        from_limits = _gpus(limits, sink)
        total += from_limits if from_limits else _gpus(requests, sink)
    return total


def pod_facts(
    *,
    namespace: str,
    name: str,
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
    gpu_count: int,
    sink: Malformed,
    phase: str | None = None,
) -> PodFacts:
    """A pod's facts; the model and backend come from annotations, else labels."""
    backend = annotations.get(keys.BACKEND) or labels.get(keys.BACKEND)
    model = annotations.get(keys.MODEL) or labels.get(keys.MODEL)
    return PodFacts(
        namespace=namespace,
        name=name,
        labels=dict(labels),
        backend=canonical_backend(backend),
        model=model.strip() if model and model.strip() else None,
        vram_estimate_mb=number(annotations, keys.VRAM_ESTIMATE_MB, sink),
        gpu_count=gpu_count,
        terminal=phase in _TERMINAL_PHASES,
    )
