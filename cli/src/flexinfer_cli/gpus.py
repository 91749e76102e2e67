"""``flexinfer up --gpus``: a declared GPU inventory for the local runtime, as people write it.

``"1x nvidia sm_90 24GiB"`` declares one 24 GiB NVIDIA sm_90 GPU on this machine; several
declarations are separated by ``;`` (``"2x nvidia sm_89 24GiB; 1x amd gfx1100 48GiB"``).
Each is, in any order: a count (``2x``, or with the multiplication sign; default 1), a
vendor (``nvidia``, ``amd``, ``intel``), an architecture (``sm_90``, ``gfx1100``), a memory
size (``24GiB``, ``24Gi``, ``24 GiB``, ``80G``) and ``node=NAME`` (default: this machine's
hostname). A JSON list is taken as it is: the controller's own ``FLEXINFER_CONTROLLER_GPUS``
format.

The result is the list of ``DeclaredGPU`` fields the controller's ``gpus`` setting takes;
the controller validates it (``flexinfer up`` reports a bad value before anything starts).
"""

from __future__ import annotations

import json
import re
from typing import Any

VENDORS = ("nvidia", "amd", "intel")
_COUNT = re.compile(r"^(\d+)\s*[x\u00d7]$", re.IGNORECASE)
_SIZE = re.compile(r"^(\d+(?:\.\d+)?)\s*(Ki|Mi|Gi|Ti|K|M|G|T)(?:i?B)?$")
_ARCH = re.compile(r"^[a-z][a-z0-9_]*$")
_UNITS = {"KiB": "Ki", "MiB": "Mi", "GiB": "Gi", "TiB": "Ti", "KB": "K", "MB": "M", "GB": "G",
          "TB": "T"}  # fmt: skip
"""How people write sizes, as the Kubernetes quantities the controller's setting takes."""


class GpuSpecError(ValueError):
    """A ``--gpus`` value that says no inventory (its message names the bad part)."""


def parse_gpus(text: str) -> list[dict[str, Any]]:
    """``--gpus TEXT`` as the controller's ``gpus`` setting (a list of DeclaredGPU fields)."""
    stripped = text.strip()
    if stripped.startswith("["):
        try:
            declared = json.loads(stripped)
        except ValueError as exc:
            raise GpuSpecError(f"not a JSON list: {exc}") from None
        if not isinstance(declared, list) or not all(isinstance(d, dict) for d in declared):
            raise GpuSpecError("a JSON --gpus value must be a list of objects")
        return declared
    parts = [p.strip() for p in stripped.split(";") if p.strip()]
    if not parts:
        raise GpuSpecError("empty: declare GPUs as, for example, '1x nvidia sm_90 24GiB'")
    return [_one(part) for part in parts]


def _tokens(text: str) -> list[str]:
    """Words, with ``24 GiB`` and ``2 x`` joined into one."""
    words = text.replace(",", " ").split()
    joined: list[str] = []
    for word in words:
        unit = re.fullmatch(r"(Ki|Mi|Gi|Ti|K|M|G|T)(?:i?B)?|[x\u00d7]", word, re.IGNORECASE)
        if unit and joined and re.fullmatch(r"\d+(\.\d+)?", joined[-1]):
            joined[-1] += word
        else:
            joined.append(word)
    return joined


def _one(text: str) -> dict[str, Any]:
    """One declaration (``2x nvidia sm_89 24GiB node=gpu-1``)."""
    gpu: dict[str, Any] = {}
    for token in _tokens(text):
        key, value = _field(token)
        if key in gpu:
            raise GpuSpecError(f"{text!r}: two values for the {key} ({gpu[key]!r}, {token!r})")
        gpu[key] = value
    if "vendor" not in gpu:
        raise GpuSpecError(f"{text!r}: no vendor (one of {', '.join(VENDORS)})")
    return gpu


def _field(token: str) -> tuple[str, Any]:
    """Which DeclaredGPU field ``token`` sets, and its value."""
    if token.lower() in VENDORS:
        return "vendor", token.lower()
    if token.startswith("node="):
        return "node", token.removeprefix("node=")
    count = _COUNT.match(token)
    if count:
        return "count", int(count.group(1))
    size = _SIZE.match(token.replace(" ", ""))
    if size:
        number, unit = size.groups()
        suffix = token.replace(" ", "")[len(number) :]
        return "vram", number + _UNITS.get(suffix, unit)
    if _ARCH.match(token):
        return "arch", token
    raise GpuSpecError(
        f"{token!r} is not a count (2x), vendor ({', '.join(VENDORS)}), architecture "
        "(sm_90), memory size (24GiB) or node=NAME"
    )
