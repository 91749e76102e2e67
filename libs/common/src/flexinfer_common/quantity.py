"""Kubernetes resource quantities (``24Gi``, ``80G``, ``512Mi``) in MiB, as GPU labels write
VRAM: the agent's ``flexinfer.ai/gpu.vram``, a declared inventory's ``vram``."""

from __future__ import annotations

import re

QUANTITY_PATTERN = r"^\d+(\.\d+)?(Ki|Mi|Gi|Ti|K|M|G|T)?$"
"""What a quantity looks like (for settings' field patterns too)."""

_QUANTITY = re.compile(r"^(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|K|M|G|T)?$")
_MIB_PER_UNIT: dict[str | None, float] = {
    None: 1 / (1024 * 1024),
    "Ki": 1 / 1024,
    "Mi": 1,
    "Gi": 1024,
    "Ti": 1024 * 1024,
    "K": 1000 / (1024 * 1024),
    "M": 1000**2 / (1024 * 1024),
    "G": 1000**3 / (1024 * 1024),
    "T": 1000**4 / (1024 * 1024),
}


def quantity_mb(raw: str) -> float | None:
    """The quantity ``raw`` in MiB; None when it is not one."""
    match = _QUANTITY.match(raw.strip())
    if match is None:
        return None
    return float(match.group(1)) * _MIB_PER_UNIT[match.group(2)]
