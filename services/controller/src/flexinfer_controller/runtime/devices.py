"""Which GPUs an engine process sees: each vendor's visibility variable, by vendor name.

A local replica is pinned to the GPUs placement chose by its environment, as a device
plugin does for a pod: the engine then sees only those, numbered from 0. The indices are
those the node agent and ``nvidia-smi``/``rocm-smi`` report, so NVIDIA engines also get
``CUDA_DEVICE_ORDER=PCI_BUS_ID`` (CUDA's own default order puts the fastest GPU first,
which is not ``nvidia-smi``'s).
"""

from __future__ import annotations

from collections.abc import Callable

from flexinfer_controller.core.gpu import GPUAssignment

VisibilityEnv = Callable[[str], dict[str, str]]
"""The variables that make only the devices in a ``0,1`` list visible."""


def _nvidia(devices: str) -> dict[str, str]:
    return {"CUDA_VISIBLE_DEVICES": devices, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


def _amd(devices: str) -> dict[str, str]:
    # HIP's variable alone: ROCR_VISIBLE_DEVICES as well would renumber the devices first,
    # and HIP's indices would then point into the already filtered list.
    return {"HIP_VISIBLE_DEVICES": devices}


def _intel(devices: str) -> dict[str, str]:
    return {"ZE_AFFINITY_MASK": devices}


def visibility_table() -> dict[str, VisibilityEnv]:
    """Vendor (lower case) -> its variables."""
    return {"nvidia": _nvidia, "amd": _amd, "intel": _intel}


def visibility_env(gpus: GPUAssignment | None) -> dict[str, str]:
    """The environment that pins an engine to ``gpus`` (none: nothing to set)."""
    if gpus is None:
        return {}
    render = visibility_table().get(gpus.vendor)
    return render(gpus.device) if render is not None else {}
