"""Where a Model's pods may run: GPU resources, the GPU toleration, node affinity.

GPU models (gpu.count > 0 on a GPU vendor) get ``dedicated=gpu:NoSchedule`` merged into
spec.tolerations, the vendor's extended resource as a limit, and a required node affinity
on the agent's labels (``flexinfer.ai/gpu.vendor``, upper case, and ``flexinfer.ai/gpu.arch``
once detectGPU knows it). The scheduler extender refines placement from there.
"""

from __future__ import annotations

from flexinfer_common.api import Model
from flexinfer_common.api.model import GPUVendor, Toleration
from flexinfer_common.errors import InvalidSpecError
from flexinfer_controller.runtime.kubernetes.names import Obj
from flexinfer_controller.runtime.kubernetes.options import GPUPlacement

GPU_RESOURCES = {"nvidia": "nvidia.com/gpu", "amd": "amd.com/gpu", "intel": "gpu.intel.com/i915"}
GPU_TOLERATION: Obj = {
    "key": "dedicated",
    "operator": "Equal",
    "value": "gpu",
    "effect": "NoSchedule",
}
VENDOR_NODE_LABEL = "flexinfer.ai/gpu.vendor"
ARCH_NODE_LABEL = "flexinfer.ai/gpu.arch"
COUNT_NODE_LABEL = "flexinfer.ai/gpu.count"


def vendor(model: Model, placement: GPUPlacement) -> str:
    """The vendor the pods need: spec.gpu.vendor, or the detected one for ``auto``."""
    declared = model.spec.gpu_or_default.vendor
    if declared is not GPUVendor.AUTO:
        return declared.value
    if placement.vendor is None:
        raise InvalidSpecError(
            "gpu.vendor is auto and no GPU vendor was detected: give the detected vendor "
            "(flexinfer render: --gpu-vendor)",
            field="spec.gpu.vendor",
        )
    return placement.vendor


def gpu_count(model: Model, chosen_vendor: str) -> int:
    """GPUs per replica: 0 on the CPU."""
    return 0 if chosen_vendor == "cpu" else model.spec.gpu_or_default.effective_count


def resources(model: Model, chosen_vendor: str) -> Obj:
    """spec.resources with the vendor's GPU limit added; quantities as strings."""
    spec = model.spec.resources
    out: Obj = {}
    for part in ("requests", "limits"):
        values = {k: str(v) for k, v in (getattr(spec, part) if spec else {}).items()}
        if values:
            out[part] = values
    count = gpu_count(model, chosen_vendor)
    if count:
        out.setdefault("limits", {})[GPU_RESOURCES[chosen_vendor]] = str(count)
    return out


def _toleration(toleration: Toleration) -> Obj:
    raw = toleration.model_dump(by_alias=True, exclude_none=True)
    return {
        k: raw[k] for k in ("key", "operator", "value", "effect", "tolerationSeconds") if k in raw
    }


def tolerations(model: Model, gpus: int) -> list[Obj]:
    """spec.tolerations, plus the GPU toleration when the pod takes GPUs (no duplicate)."""
    out = [_toleration(t) for t in model.spec.tolerations or []]
    if gpus and GPU_TOLERATION not in out:
        out.append(dict(GPU_TOLERATION))
    return out


def affinity(chosen_vendor: str, gpus: int, placement: GPUPlacement) -> Obj | None:
    """A required node affinity on the agent's GPU labels; None on the CPU."""
    if not gpus:
        return None
    expressions: list[Obj] = [
        {"key": VENDOR_NODE_LABEL, "operator": "In", "values": [chosen_vendor.upper()]}
    ]
    if placement.arch:
        expressions.append({"key": ARCH_NODE_LABEL, "operator": "In", "values": [placement.arch]})
    if gpus > 1:
        expressions.append({"key": COUNT_NODE_LABEL, "operator": "Gt", "values": [str(gpus - 1)]})
    terms = [{"matchExpressions": expressions}]
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}
        }
    }
