"""The fallback: ``/sys/class/drm/cardN/device``, what the kernel knows without a vendor tool.

Each ``cardN`` (not its connectors ``cardN-DP-1`` or the render nodes) has the PCI
``vendor`` and ``device`` ids; amdgpu adds ``mem_info_vram_total`` and ``mem_info_vram_used``
in bytes. There is no model name or architecture here: the device class is built from the
PCI ids (``nvidia-pci-27b8``), and the node gets no ``gpu.arch`` label. Display-only
devices (a server's BMC VGA, vendor 0x1a03) are not GPUs for serving and are skipped.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from flexinfer_agent.core.commands import BadOutputError, ToolMissingError
from flexinfer_agent.core.gpu import GPU, Vendor, mib
from flexinfer_agent.core.sources.base import GPUSource, integer
from flexinfer_agent.settings import DiscoverySettings

NAME = "drm"
PCI_VENDORS = {"0x10de": Vendor.NVIDIA, "0x1002": Vendor.AMD, "0x8086": Vendor.INTEL}
_CARD = re.compile(r"^card(\d+)$")


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise BadOutputError(f"{NAME}: cannot read {path}: {exc.strerror}") from exc


def _card(index: int, device: Path) -> GPU | None:
    vendor = PCI_VENDORS.get((_read(device / "vendor") or "").lower())
    if vendor is None:
        return None
    pci_id = (_read(device / "device") or "0x0").lower().removeprefix("0x")
    total = _read(device / "mem_info_vram_total")
    used = _read(device / "mem_info_vram_used")
    total_b = integer(total, "mem_info_vram_total", NAME) if total is not None else None
    used_b = integer(used, "mem_info_vram_used", NAME) if used is not None else None
    return GPU(
        vendor=vendor,
        name=f"{vendor.value.lower()} pci {pci_id}",
        index=index,
        source=NAME,
        memory_total_mib=mib(total_b) if total_b is not None else None,
        memory_free_mib=mib(total_b - used_b)
        if total_b is not None and used_b is not None
        else None,
    )


def scan(root: Path) -> list[GPU]:
    """The GPUs under a ``/sys/class/drm``-shaped directory, by card number."""
    if not root.is_dir():
        raise ToolMissingError(f"{NAME}: {root} does not exist")
    gpus = []
    for entry in sorted(root.iterdir()):
        match = _CARD.match(entry.name)
        if match is not None and (gpu := _card(int(match.group(1)), entry / "device")):
            gpus.append(gpu)
    return sorted(gpus, key=lambda gpu: gpu.index)


class DrmSource:
    """GPUs from sysfs."""

    def __init__(self, settings: DiscoverySettings) -> None:
        self._root = settings.drm_root

    async def discover(self) -> list[GPU]:
        """Every NVIDIA, AMD or Intel card the kernel shows."""
        return await asyncio.to_thread(scan, self._root)


def drm_source(settings: DiscoverySettings) -> GPUSource:
    """The sysfs fallback source."""
    return DrmSource(settings)
