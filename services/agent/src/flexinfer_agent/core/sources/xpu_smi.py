"""Intel's ``xpu-smi``: ``discovery -j`` lists the devices, ``discovery -d N -j`` sizes one.

The list (``{"device_list": [{"device_id": 0, "device_name": "Intel(R) Data Center GPU Max
1550", "pci_device_id": "0xbd5", "uuid": …}]}``) has no memory; each device's own
discovery has ``memory_physical_size_byte`` and, in recent releases,
``memory_free_size_byte`` (strings of bytes). The architecture comes from the PCI device id.
"""

from __future__ import annotations

from typing import Any

from flexinfer_agent.core.commands import BadOutputError, run_tool
from flexinfer_agent.core.gpu import GPU, Vendor, mib
from flexinfer_agent.core.sources.base import GPUSource, integer, json_object
from flexinfer_agent.settings import DiscoverySettings

NAME = "xpu-smi"
LIST = ("discovery", "-j")

ARCH_BY_DEVICE_ID_PREFIX = (
    ("0x0bd", "pvc"),  # Data Center GPU Max (Ponte Vecchio, Xe-HPC)
    ("0x56c", "dg2"),  # Data Center GPU Flex (Alchemist, Xe-HPG)
    ("0x56", "dg2"),  # Arc A-series
    ("0xe20", "bmg"),  # Arc B-series (Battlemage)
)
"""PCI device id prefixes → the oneAPI ahead-of-time target (first match wins)."""


def intel_arch(pci_device_id: str) -> str | None:
    """The oneAPI target of a PCI device id (``0xbd5`` → ``pvc``); None when unknown."""
    device = pci_device_id.lower()
    normalised = "0x" + device.removeprefix("0x").zfill(4)
    return next(
        (arch for prefix, arch in ARCH_BY_DEVICE_ID_PREFIX if normalised.startswith(prefix)), None
    )


def parse_list(text: str) -> list[dict[str, Any]]:
    """The ``device_list`` entries of ``xpu-smi discovery -j``."""
    devices = json_object(text, NAME).get("device_list", [])
    if not isinstance(devices, list) or not all(isinstance(d, dict) for d in devices):
        raise BadOutputError(f"{NAME}: device_list is not a list of objects")
    return [d for d in devices if d.get("device_type", "GPU") == "GPU"]


def parse_device(listed: dict[str, Any], detail_text: str) -> GPU:
    """One device from its list entry and its own ``discovery -d N -j`` output."""
    detail = {**listed, **json_object(detail_text, NAME)}
    total = detail.get("memory_physical_size_byte")
    free = detail.get("memory_free_size_byte")
    return GPU(
        vendor=Vendor.INTEL,
        name=str(detail.get("device_name") or "Intel GPU"),
        index=integer(detail.get("device_id"), "device_id", NAME),
        source=NAME,
        uuid=str(detail["uuid"]) if detail.get("uuid") else None,
        memory_total_mib=mib(integer(total, "memory size", NAME)) if total is not None else None,
        memory_free_mib=mib(integer(free, "free memory", NAME)) if free is not None else None,
        arch=intel_arch(str(detail.get("pci_device_id", ""))),
    )


class XpuSmiSource:
    """GPUs from ``xpu-smi discovery``."""

    def __init__(self, settings: DiscoverySettings) -> None:
        self._tool = settings.xpu_smi
        self._timeout_s = settings.timeout_s

    async def discover(self) -> list[GPU]:
        """Every Intel GPU, each sized by its own discovery."""
        gpus = []
        for listed in parse_list(await run_tool([self._tool, *LIST], self._timeout_s)):
            device_id = integer(listed.get("device_id"), "device_id", NAME)
            argv = [self._tool, "discovery", "-d", str(device_id), "-j"]
            gpus.append(parse_device(listed, await run_tool(argv, self._timeout_s)))
        return gpus


def xpu_smi_source(settings: DiscoverySettings) -> GPUSource:
    """The ``xpu-smi`` source."""
    return XpuSmiSource(settings)
