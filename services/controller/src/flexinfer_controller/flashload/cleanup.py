"""Remove stale flash copies: models no longer declared, and temp copies a crash left.

Only entries the flash loader made are touched (a directory holding its manifest, or a
name with its temp prefix): ``/dev/shm`` also holds other programs' shared memory.
"""

from __future__ import annotations

import os
import secrets
import shutil
import stat
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from flexinfer_controller.flashload import locks
from flexinfer_controller.flashload.errors import FlashLoadError
from flexinfer_controller.flashload.plan import MANIFEST_NAME, TEMP_PREFIX, safe_name


@dataclass
class CleanupReport:
    """What a cleanup removed, kept, and left because a loader holds the name now."""

    removed: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    busy: list[str] = field(default_factory=list)


def temp_path(dest_root: Path, safe: str) -> Path:
    """A fresh temp name for model ``safe``: ``.flashload-<safe>.<random>.tmp``."""
    return dest_root / f"{TEMP_PREFIX}{safe}.{secrets.token_hex(6)}.tmp"


def remove_copy(path: Path) -> None:
    """Rename a copy to a temp name, then delete it: a half-deleted copy has no final name."""
    doomed = temp_path(path.parent, path.name)
    try:
        os.rename(path, doomed)
        shutil.rmtree(doomed)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise FlashLoadError(f"cannot remove the stale copy {path}: {exc.strerror}") from exc


def cleanup(dest_root: Path, keep: Iterable[str]) -> CleanupReport:
    """Remove every flash copy in ``dest_root`` not named in ``keep``, and dead temp copies."""
    kept = {safe_name(key) for key in keep}
    report = CleanupReport()
    for safe, (copy, temps) in sorted(_owned(dest_root).items()):
        _sweep(dest_root, safe, copy, temps, keep=safe in kept, report=report)
    return report


def remove_model(dest_root: Path, key: str) -> CleanupReport:
    """Remove the flash copy of Model ``key`` (namespace/name) and its temp copies."""
    safe = safe_name(key)
    report = CleanupReport()
    found = _owned(dest_root).get(safe)
    if found is not None:
        _sweep(dest_root, safe, *found, keep=False, report=report)
    return report


def _sweep(
    dest_root: Path, safe: str, copy: bool, temps: list[Path], *, keep: bool, report: CleanupReport
) -> None:
    """Under the name's lock: drop its temp copies, and the copy itself unless ``keep``."""
    with locks.held_unless_busy(locks.lock_path(dest_root, safe)) as free:
        if not free:
            report.busy.append(safe)
            return
        for temp in temps:
            shutil.rmtree(temp, ignore_errors=True)
            report.removed.append(temp.name)
        if keep:
            report.kept.extend([safe] if copy else [])
            return
        if copy:
            remove_copy(dest_root / safe)
            report.removed.append(safe)
        # Unlinked while held: a loader waiting on it then locks an orphan inode, which
        # is harmless, as nothing should load a model that is no longer declared.
        locks.lock_path(dest_root, safe).unlink(missing_ok=True)


def _owned(dest_root: Path) -> dict[str, tuple[bool, list[Path]]]:
    """By model name: whether a complete copy exists, and its temp copies."""
    copies: set[str] = set()
    temps: dict[str, list[Path]] = defaultdict(list)
    try:
        entries = sorted(os.scandir(dest_root), key=lambda e: e.name)
    except OSError as exc:
        raise FlashLoadError(f"cannot list {dest_root}: {exc.strerror}") from exc
    for entry in entries:
        if entry.name.startswith(TEMP_PREFIX):
            rest = entry.name[len(TEMP_PREFIX) :]
            if rest.endswith(".lock"):
                temps.setdefault(rest[: -len(".lock")], [])
            elif rest.endswith(".tmp") and _is_dir(Path(entry.path)):
                temps[rest[: -len(".tmp")].rpartition(".")[0]].append(Path(entry.path))
        elif _is_dir(Path(entry.path)) and (Path(entry.path) / MANIFEST_NAME).is_file():
            copies.add(entry.name)
    return {name: (name in copies, temps.get(name, [])) for name in copies | set(temps)}


def _is_dir(path: Path) -> bool:
    try:
        return stat.S_ISDIR(path.lstat().st_mode)
    except OSError:
        return False
