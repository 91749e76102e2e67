"""macOS: ``system_profiler SPDisplaysDataType SPHardwareDataType -json``.

``SPDisplaysDataType`` lists the GPUs (``"sppci_model": "Apple M2 Max"``, ``"spdisplays_vendor":
"sppci_vendor_Apple"``, ``"spdisplays_mtlgpufamilysupport": "spdisplays_metal3"``). Apple
silicon has no VRAM of its own: its GPU shares the machine's memory, which
``SPHardwareDataType`` gives (``"physical_memory": "64 GB"``); a discrete GPU of an Intel Mac
has ``spdisplays_vram`` (``"8 GB"``). The architecture label is the Metal family.
"""

from __future__ import annotations

import re
from typing import Any

from flexinfer_agent.core.commands import BadOutputError, run_tool
from flexinfer_agent.core.gpu import GPU, Vendor
from flexinfer_agent.core.sources.base import GPUSource, json_object
from flexinfer_agent.settings import DiscoverySettings

NAME = "system-profiler"
ARGS = ("SPDisplaysDataType", "SPHardwareDataType", "-json")
VENDORS = {
    "sppci_vendor_apple": Vendor.APPLE,
    "sppci_vendor_amd": Vendor.AMD,
    "sppci_vendor_ati": Vendor.AMD,
    "sppci_vendor_intel": Vendor.INTEL,
    "sppci_vendor_nvidia": Vendor.NVIDIA,
}
_SIZE = re.compile(r"^(\d+)\s*(MB|GB|TB)$", re.IGNORECASE)
_MIB_PER = {"mb": 1, "gb": 1024, "tb": 1024 * 1024}


def size_mib(value: object) -> int | None:
    """``"64 GB"`` → 65536 (macOS means binary units there); None when absent or odd."""
    match = _SIZE.match(str(value or "").strip())
    return int(match.group(1)) * _MIB_PER[match.group(2).lower()] if match else None


def _entries(data: dict[str, Any], key: str) -> list[dict[str, Any]]:
    entries = data.get(key, [])
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise BadOutputError(f"{NAME}: {key} is not a list of objects")
    return entries


def parse(text: str) -> list[GPU]:
    """The GPUs ``system_profiler`` lists (displays without a GPU are skipped)."""
    data = json_object(text, NAME)
    hardware = _entries(data, "SPHardwareDataType")
    unified = size_mib(hardware[0].get("physical_memory")) if hardware else None
    gpus: list[GPU] = []
    for entry in _entries(data, "SPDisplaysDataType"):
        vendor = VENDORS.get(str(entry.get("spdisplays_vendor", "")).lower())
        if vendor is None or entry.get("sppci_device_type", "spdisplays_gpu") != "spdisplays_gpu":
            continue
        family = str(entry.get("spdisplays_mtlgpufamilysupport", ""))
        memory = size_mib(entry.get("spdisplays_vram")) or (
            unified if vendor is Vendor.APPLE else None
        )
        gpus.append(
            GPU(
                vendor=vendor,
                name=str(entry.get("sppci_model") or entry.get("_name") or "GPU"),
                index=len(gpus),
                source=NAME,
                memory_total_mib=memory,
                arch=family.removeprefix("spdisplays_") or None,
            )
        )
    return gpus


class SystemProfilerSource:
    """GPUs from macOS's ``system_profiler``."""

    def __init__(self, settings: DiscoverySettings) -> None:
        self._tool = settings.system_profiler
        self._timeout_s = settings.timeout_s

    async def discover(self) -> list[GPU]:
        """Every GPU the Mac has."""
        return parse(await run_tool([self._tool, *ARGS], self._timeout_s))


def system_profiler_source(settings: DiscoverySettings) -> GPUSource:
    """The ``system_profiler`` source."""
    return SystemProfilerSource(settings)
