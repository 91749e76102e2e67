"""One flock(2) per model name: a loader holds it for its whole load, cleanup to delete.

Every temp copy of a name is made under its lock, so cleanup that takes the lock knows
no loader is writing the name's temp copies, and that they are a crash's leftovers.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from flexinfer_controller.flashload.plan import TEMP_PREFIX


def lock_path(dest_root: Path, safe: str) -> Path:
    """The lock file that serialises work on one model name in ``dest_root``."""
    return dest_root / f"{TEMP_PREFIX}{safe}.lock"


def _open(path: Path) -> int:
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)


@contextlib.contextmanager
def held(path: Path) -> Iterator[None]:
    """Hold the exclusive lock on ``path`` (created if missing), waiting for it."""
    fd = _open(path)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


@contextlib.contextmanager
def held_unless_busy(path: Path) -> Iterator[bool]:
    """Hold the lock on ``path`` if it is free now; yields False (holding nothing) if not."""
    fd = _open(path)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)
