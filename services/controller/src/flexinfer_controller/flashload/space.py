"""Free space of the copy's filesystem, and the refusal when a model does not fit."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Protocol

from flexinfer_controller.flashload.errors import InsufficientSpaceError


class FreeSpace(Protocol):
    """Where the free bytes of a filesystem come from (statvfs; a fixed number in tests)."""

    def free_bytes(self, path: Path) -> int:
        """Bytes an unprivileged writer may still allocate on ``path``'s filesystem."""
        ...


class StatvfsSpace:
    """Free space as ``statvfs`` reports it: available blocks times the fragment size."""

    def free_bytes(self, path: Path) -> int:
        """``f_bavail * f_frsize`` of ``path``'s filesystem."""
        found = os.statvfs(path)
        return found.f_bavail * found.f_frsize


def human(size: int) -> str:
    """Bytes as a short binary size: ``512 B``, ``1.5 GiB``."""
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


def check_fits(path: Path, needed: int, margin: int, space: FreeSpace, what: str) -> None:
    """Raise :class:`InsufficientSpaceError` unless ``needed + margin`` bytes are free."""
    free = space.free_bytes(path)
    if needed + margin > free:
        raise InsufficientSpaceError(
            f"{what} needs {human(needed)} ({needed} bytes) plus a {human(margin)} margin, "
            f"but {path} has {human(free)} ({free} bytes) free",
            needed=needed,
            free=free,
            margin=margin,
        )
