"""``rocm-smi --showproductname --showmeminfo vram --json``: AMD GPUs.

One object per card, every value a string: ``{"card0": {"VRAM Total Memory (B)":
"205822885888", "VRAM Total Used Memory (B)": "297648128", "Card Series": "AMD Instinct
MI300X", "GFX Version": "gfx942", ...}}``. Older releases spell the product keys in lower
case (``Card series``) and name the card as pci.ids does (``Navi 31 [Radeon RX 7900
XT/7900 XTX]``); some print a low-power ``WARNING`` line before the JSON.
"""

from __future__ import annotations

import re
from typing import Any

from flexinfer_agent.core.commands import BadOutputError, run_tool
from flexinfer_agent.core.gpu import GPU, Vendor, mib
from flexinfer_agent.core.sources.base import GPUSource, integer, json_object
from flexinfer_agent.settings import DiscoverySettings

ARGS = ("--showproductname", "--showmeminfo", "vram", "--json")
NAME = "rocm-smi"
_CARD = re.compile(r"^card(\d+)$")
_GFX = re.compile(r"^gfx[0-9a-f]+$")


def _field(card: dict[str, Any], key: str) -> str | None:
    # Key case differs between ROCm releases ("Card series" / "Card Series").
    for name, value in card.items():
        if name.lower() == key.lower() and str(value) not in ("", "N/A"):
            return str(value)
    return None


def _card(index: int, card: dict[str, Any]) -> GPU:
    total = _field(card, "VRAM Total Memory (B)")
    used = _field(card, "VRAM Total Used Memory (B)")
    total_b = integer(total, "VRAM total", NAME) if total is not None else None
    used_b = integer(used, "VRAM used", NAME) if used is not None else None
    gfx = (_field(card, "GFX Version") or "").lower()
    return GPU(
        vendor=Vendor.AMD,
        name=_field(card, "Card Series") or _field(card, "Card Model") or "AMD GPU",
        index=index,
        source=NAME,
        uuid=_field(card, "Unique ID") or _field(card, "GUID"),
        memory_total_mib=mib(total_b) if total_b is not None else None,
        memory_free_mib=mib(total_b - used_b)
        if total_b is not None and used_b is not None
        else None,
        arch=gfx if _GFX.match(gfx) else None,
    )


def parse(text: str) -> list[GPU]:
    """The cards in ``rocm-smi``'s JSON, by card number."""
    cards = []
    for key, value in json_object(text, NAME).items():
        match = _CARD.match(key)
        if match is None:
            continue  # "system" and other non-card entries
        if not isinstance(value, dict):
            raise BadOutputError(f"{NAME}: {key} is not an object")
        cards.append(_card(int(match.group(1)), value))
    return sorted(cards, key=lambda gpu: gpu.index)


class RocmSmiSource:
    """GPUs from ``rocm-smi``'s JSON."""

    def __init__(self, settings: DiscoverySettings) -> None:
        self._tool = settings.rocm_smi
        self._timeout_s = settings.timeout_s

    async def discover(self) -> list[GPU]:
        """Every AMD card ``rocm-smi`` lists."""
        return parse(await run_tool([self._tool, *ARGS], self._timeout_s))


def rocm_smi_source(settings: DiscoverySettings) -> GPUSource:
    """The ``rocm-smi`` source."""
    return RocmSmiSource(settings)
