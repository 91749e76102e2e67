"""The label and annotation keys placement reads (reference §4), in one place."""

from __future__ import annotations

PREFIX = "flexinfer.ai/"

# Node labels the agent sets.
GPU_VENDOR = PREFIX + "gpu.vendor"
GPU_ARCH = PREFIX + "gpu.arch"
GPU_VRAM = PREFIX + "gpu.vram"
"""Memory of one GPU, a quantity (``24Gi``)."""
GPU_COUNT = PREFIX + "gpu.count"
GPU_INT4 = PREFIX + "gpu.int4"
GPU_DEVICE_CLASS = PREFIX + "gpu.device-class"
"""The agent's name for the node's GPU model (``nvidia-l4``): the benchmark key's deviceClass."""

# Node annotations the agent writes for scoring.
GPU_FREE_MEMORY = PREFIX + "gpu-free-memory"
"""Free VRAM summed over the node's GPUs, in MB."""
GPU_UTIL = PREFIX + "gpu.util"
"""Average GPU utilisation, in percent."""
COST = PREFIX + "cost"
KV_CACHE_USAGE = PREFIX + "kv-cache-usage"
"""KV-cache usage of the node's engines, a 0..1 ratio."""

# Pod annotations (or labels) the controller sets.
MODEL = PREFIX + "model"
BACKEND = PREFIX + "backend"
VRAM_ESTIMATE_MB = PREFIX + "gpu.vram-estimate-mb"
"""One GPU's share of the model, in MB: the filter needs it times the pod's GPU count."""
DEPLOYMENT_LABEL = "modeldeployment_cr"
"""v1alpha1's label naming a pod's ModelDeployment (its ``<name>-benchmark-results``)."""

GPU_RESOURCES = ("nvidia.com/gpu", "amd.com/gpu", "gpu.intel.com/i915")
"""Extended resources that count as GPUs in a pod's requests or limits."""
