"""NVML through the optional ``nvidia-ml-py`` package (module ``pynvml``), preferred for NVIDIA.

It asks the driver directly: no process per heartbeat, and MIG instances come with their
own memory figures. The package is not a dependency: where it is not installed the source
reports ``missing``; where it is but no driver is loaded, ``nvmlInit`` raises an
``NVMLError`` (``LibraryNotFound``, ``DriverNotLoaded``) and discovery falls through to
``nvidia-smi`` and the others the same way.
"""

from __future__ import annotations

import asyncio
import importlib
import re
from types import ModuleType
from typing import Any

from flexinfer_agent.core.commands import DiscoveryError, ToolFailedError, ToolMissingError
from flexinfer_agent.core.gpu import GPU, Vendor, mib
from flexinfer_agent.core.sources.base import GPUSource
from flexinfer_agent.settings import DiscoverySettings

NAME = "nvml"
NO_DRIVER = {"NVMLError_LibraryNotFound", "NVMLError_DriverNotLoaded", "NVMLError_NoPermission"}
"""NVMLErrors that mean "no usable NVIDIA driver here" rather than a failure."""
_MIG_NAME = re.compile(r"MIG (\S+)$")


def _text(value: Any) -> str:
    # nvidia-ml-py before 11.515 returns bytes.
    return value.decode() if isinstance(value, bytes) else str(value)


def _mig_instances(nvml: Any, parent: Any, gpu: GPU) -> list[GPU]:
    instances = []
    for slot in range(nvml.nvmlDeviceGetMaxMigDeviceCount(parent)):
        try:
            handle = nvml.nvmlDeviceGetMigDeviceHandleByIndex(parent, slot)
        except nvml.NVMLError:
            continue  # an empty slot: no instance was created there
        memory = nvml.nvmlDeviceGetMemoryInfo(handle)
        profile = _MIG_NAME.search(_text(nvml.nvmlDeviceGetName(handle)))
        instances.append(
            GPU(
                vendor=Vendor.NVIDIA,
                name=gpu.name,
                index=gpu.index,
                source=NAME,
                uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
                memory_total_mib=mib(memory.total),
                memory_free_mib=mib(memory.free),
                arch=gpu.arch,
                mig_profile=profile.group(1) if profile else "unknown",
            )
        )
    return instances


def _mig_enabled(nvml: Any, handle: Any) -> bool:
    try:
        current, _pending = nvml.nvmlDeviceGetMigMode(handle)
    except nvml.NVMLError:
        return False  # NotSupported: a GPU without MIG
    return bool(current == nvml.NVML_DEVICE_MIG_ENABLE)


def _device(nvml: Any, index: int) -> list[GPU]:
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    memory = nvml.nvmlDeviceGetMemoryInfo(handle)
    major, minor = nvml.nvmlDeviceGetCudaComputeCapability(handle)
    gpu = GPU(
        vendor=Vendor.NVIDIA,
        name=_text(nvml.nvmlDeviceGetName(handle)),
        index=index,
        source=NAME,
        uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
        memory_total_mib=mib(memory.total),
        memory_free_mib=mib(memory.free),
        arch=f"sm_{major}{minor}",
    )
    return _mig_instances(nvml, handle, gpu) if _mig_enabled(nvml, handle) else [gpu]


def read_devices(nvml: ModuleType) -> list[GPU]:
    """Every GPU (MIG instances in place of their parent), between init and shutdown."""
    api: Any = nvml
    try:
        api.nvmlInit()
    except api.NVMLError as exc:
        missing = type(exc).__name__ in NO_DRIVER
        raise (ToolMissingError if missing else ToolFailedError)(f"{NAME}: {exc}") from exc
    try:
        return [gpu for index in range(api.nvmlDeviceGetCount()) for gpu in _device(api, index)]
    except api.NVMLError as exc:
        raise ToolFailedError(f"{NAME}: {exc}") from exc
    finally:
        api.nvmlShutdown()


class NvmlSource:
    """GPUs from NVML, when ``nvidia-ml-py`` is installed and a driver is loaded."""

    def __init__(self, settings: DiscoverySettings) -> None:
        self._module = settings.nvml_module

    async def discover(self) -> list[GPU]:
        """Every NVIDIA GPU the driver knows."""
        try:
            nvml = importlib.import_module(self._module)
        except ImportError as exc:
            raise ToolMissingError(f"{NAME}: {self._module} is not installed") from exc
        try:
            return await asyncio.to_thread(read_devices, nvml)
        except DiscoveryError:
            raise
        except Exception as exc:  # a pynvml too old for a call, a driver in a bad state
            raise ToolFailedError(f"{NAME}: {type(exc).__name__}: {exc}") from exc


def nvml_source(settings: DiscoverySettings) -> GPUSource:
    """The NVML source."""
    return NvmlSource(settings)
