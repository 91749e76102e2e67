"""The field-by-field mapping between a ModelDeployment (v1alpha1) and a Model (v1alpha2).

These functions are the *plain* mapping: each side's value from the other's, clamped into
the target's bounds. What they cannot carry (a field with no counterpart, a value clamped
or spelled differently) is kept by :mod:`flexinfer_common.api.conversion` in an annotation.

The source rule: a ``model`` that already is a URI (has ``://``) is the source as written;
otherwise, with the ollama backend it becomes ``ollama://<model>`` (``llama3:8b``), and with
any other backend it is a Hugging Face id: ``hf://<model>``. Back, ``hf://`` (any case) and,
for ollama, ``ollama://`` are stripped again.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from flexinfer_common.api.conversion_config import canonical_backend, settings_for
from flexinfer_common.api.model import (
    GPU_RESOURCE_NAMES,
    GPU_VENDOR_NODE_LABEL,
    GPUVendor,
    ModelSpec,
)
from flexinfer_common.api.modeldeployment import (
    INT32_MAX,
    DeploymentPhase,
    ModelDeploymentSpec,
    ModelDeploymentStatus,
)
from flexinfer_common.api.status import ModelPhase, ModelStatus

Doc = dict[str, Any]

GPU_RESOURCES = {"nvidia.com/gpu": GPUVendor.NVIDIA, "amd.com/gpu": GPUVendor.AMD}
"""v1alpha1 GPU resource names with a v1alpha2 vendor (gpu.intel.com/i915 has none)."""
_MAX_REPLICAS = 10
_MAX_IDLE_SECONDS = 10 * 365 * 24 * 3600


def _clamp(value: int, low: int, high: int) -> int:
    return max(low, min(high, value))


def model_source(backend: str, model: str) -> str:
    """spec.source for a v1alpha1 ``model`` (see the module docstring for the rule)."""
    if "://" in model:
        return model
    scheme = "ollama" if canonical_backend(backend) == "ollama" else "hf"
    return f"{scheme}://{model}"


def deployment_model(backend: str, source: str) -> str:
    """The v1alpha1 ``model`` for a spec.source: model_source's inverse."""
    schemes = ["hf://"] + (["ollama://"] if canonical_backend(backend) == "ollama" else [])
    for scheme in schemes:
        rest = source[len(scheme) :]
        if source[: len(scheme)].lower() == scheme and rest and "://" not in rest:
            return rest
    return source


def _gpu_count(quantity: int | str) -> int | None:
    try:
        count = int(quantity)
    except ValueError:
        return None
    return count if 1 <= count <= 8 else None


def _gpu_to_v2(md: ModelDeploymentSpec) -> tuple[Doc, Doc | None]:
    """spec.gpu and the remaining spec.resources from a v1alpha1 spec."""
    gpu: Doc = {"vendor": GPUVendor.AUTO.value, "priority": md.priority}
    resources: Doc = {"limits": {}, "requests": {}}
    for part in ("limits", "requests"):
        for name, qty in (getattr(md.resources, part) if md.resources else {}).items():
            if name in GPU_RESOURCES:
                gpu.setdefault("count", _gpu_count(qty))
                gpu["vendor"] = GPU_RESOURCES[name].value
            elif name not in GPU_RESOURCE_NAMES:  # i915 has no vendor: the annotation keeps it
                resources[part][name] = qty
    label = (md.node_selector or {}).get(GPU_VENDOR_NODE_LABEL)
    if label is not None and label != gpu["vendor"]:
        gpu["vendor"] = GPUVendor.AUTO.value  # the CEL rule forbids disagreeing pins
    if md.vram_estimate_mb is not None and md.vram_estimate_mb >= 0:
        gpu["vramEstimateMB"] = md.vram_estimate_mb
    gpu["shared"] = md.gpu_group_ref
    return gpu, (resources if resources["limits"] or resources["requests"] else None)


def spec_to_v2(md: ModelDeploymentSpec) -> Doc:
    """A Model's spec (JSON form) from a ModelDeployment's."""
    max_replicas = _clamp(md.replicas, 1, _MAX_REPLICAS)
    gpu, resources = _gpu_to_v2(md)
    settings = settings_for(md.backend)
    sub = getattr(md, settings.field) if settings else None
    config = settings.to_config(sub) if settings and sub is not None else None
    return {
        "backend": md.backend,
        "source": model_source(md.backend, md.model),
        "gpu": gpu,
        "serverless": {
            "enabled": True,
            "minReplicas": min(md.min_replicas, max_replicas),
            "maxReplicas": max_replicas,
            "idleTimeout": f"{min(md.idle_timeout_seconds, _MAX_IDLE_SECONDS)}s",
            "coldStartTimeout": f"{md.cold_start_timeout_seconds}s",
        },
        "config": config or None,
        "resources": resources,
        "nodeSelector": md.node_selector,
        "litellm": md.litellm.model_dump(mode="json", by_alias=True) if md.litellm else None,
        "serviceLabels": md.service_labels,
    }


def _resources_to_v1(spec: ModelSpec) -> Doc | None:
    resources: Doc = {
        "limits": dict(spec.resources.limits) if spec.resources else {},
        "requests": dict(spec.resources.requests) if spec.resources else {},
    }
    vendor = spec.gpu.vendor if spec.gpu else GPUVendor.CPU
    for name, named_vendor in GPU_RESOURCES.items():
        if vendor is named_vendor and spec.gpu:
            resources["limits"][name] = spec.gpu.effective_count
    return resources if resources["limits"] or resources["requests"] else None


def spec_to_v1(spec: ModelSpec) -> Doc:
    """A ModelDeployment's spec (JSON form) from a Model's."""
    serverless = spec.serverless_or_default
    cold = serverless.cold_start_timeout
    min_replicas = (
        serverless.min_replicas if serverless.enabled else max(1, serverless.min_replicas)
    )
    out: Doc = {
        "backend": spec.backend,
        "model": deployment_model(spec.backend, spec.source),
        "replicas": serverless.max_replicas,
        "minReplicas": min_replicas,
        "idleTimeoutSeconds": min(int(serverless.idle_timeout.total_seconds()), INT32_MAX),
        "coldStartTimeoutSeconds": _clamp(int(cold.total_seconds()), 10, 1800) if cold else 60,
        "resources": _resources_to_v1(spec),
        "nodeSelector": spec.node_selector,
        "litellm": spec.litellm.model_dump(mode="json", by_alias=True) if spec.litellm else None,
        "serviceLabels": spec.service_labels,
    }
    if spec.gpu:
        out["priority"] = spec.gpu.priority
        out["vramEstimateMB"] = spec.gpu.vram_estimate_mb
        out["gpuGroupRef"] = spec.gpu.shared
    settings = settings_for(spec.backend)
    if settings and spec.config is not None:
        sub = settings.from_config(spec.config)
        key = ModelDeploymentSpec.model_fields[settings.field].alias or settings.field
        out[key] = sub.model_dump(mode="json", by_alias=True) if isinstance(sub, BaseModel) else sub
    return out


_PHASE_TO_V2 = {
    DeploymentPhase.PENDING: ModelPhase.PENDING,
    DeploymentPhase.RUNNING: ModelPhase.READY,
    DeploymentPhase.FAILED: ModelPhase.FAILED,
    DeploymentPhase.TERMINATING: ModelPhase.PENDING,
}
_PHASE_TO_V1 = {
    ModelPhase.READY: DeploymentPhase.RUNNING,
    ModelPhase.FAILED: DeploymentPhase.FAILED,
}


def _present(values: Doc) -> Doc | None:
    """``values`` when one of them is set, else None (no empty metrics object)."""
    return values if any(v is not None for v in values.values()) else None


def status_to_v2(status: ModelDeploymentStatus) -> Doc:
    """A Model's status (JSON form) from a ModelDeployment's."""
    dumped = status.model_dump(mode="json", by_alias=True)
    gpu = dumped["allocatedGPU"]
    metrics = dumped["metrics"] or {}
    tps = metrics.get("tokensPerSecond") or dumped["tokensPerSecond"]
    return {
        "phase": _PHASE_TO_V2[status.phase].value,
        "conditions": dumped["conditions"],
        "gpu": gpu
        and {k: gpu[k] for k in ("node", "device", "memoryMB")} | {"vendor": gpu["type"]},
        "endpoint": (dumped["endpoints"] or {}).get("internal"),
        "lastActiveTime": dumped["lastAccessTime"],
        "metrics": _present({"tokensPerSecond": tps, "avgLatencyMs": metrics.get("avgLatencyMs")}),
    }


def status_to_v1(status: ModelStatus) -> Doc:
    """A ModelDeployment's status (JSON form) from a Model's."""
    dumped = status.model_dump(mode="json", by_alias=True)
    gpu = dumped["gpu"]
    metrics = dumped["metrics"] or {}
    return {
        "phase": _PHASE_TO_V1.get(status.phase, DeploymentPhase.PENDING).value,
        "conditions": dumped["conditions"],
        "allocatedGPU": gpu
        and {k: gpu[k] for k in ("node", "device", "memoryMB")} | {"type": gpu["vendor"]},
        "endpoints": {"internal": dumped["endpoint"]} if dumped["endpoint"] else None,
        "lastAccessTime": dumped["lastActiveTime"],
        "metrics": _present(
            {
                "tokensPerSecond": metrics.get("tokensPerSecond"),
                "avgLatencyMs": metrics.get("avgLatencyMs"),
            }
        ),
        "tokensPerSecond": metrics.get("tokensPerSecond"),
    }
