"""A copy's manifest: what it was copied from, so a later load can reuse it, not recopy."""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from flexinfer_controller.flashload.plan import MANIFEST_NAME, CopyPlan, PlannedFile


class FileRecord(BaseModel):
    """One copied file as it was in the source."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str
    size: int
    mtime_ns: int
    sha256: str | None = None


class Manifest(BaseModel):
    """Written last into a copy; a directory without a valid one is not a complete copy."""

    model_config = ConfigDict(extra="forbid")

    version: Literal[1] = 1
    key: str
    source: str
    reuse_check: str
    files: list[FileRecord]


def sha256_of(path: Path) -> str:
    """The hex SHA-256 of a file's content (hashlib releases the GIL while it hashes)."""
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def build(plan: CopyPlan, reuse_check: str, hashes: dict[str, str]) -> Manifest:
    """The manifest of a finished copy of ``plan`` (``hashes`` by path, may be empty)."""
    files = [
        FileRecord(path=f.path, size=f.size, mtime_ns=f.mtime_ns, sha256=hashes.get(f.path))
        for f in plan.files
    ]
    return Manifest(key=plan.key, source=str(plan.source), reuse_check=reuse_check, files=files)


def write(directory: Path, manifest: Manifest) -> None:
    """Write the manifest into ``directory`` and fsync it."""
    fd = os.open(directory / MANIFEST_NAME, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.write(fd, manifest.model_dump_json(indent=1).encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def read(directory: Path) -> Manifest | None:
    """The manifest of a copy, or None when it is missing or unreadable (incomplete)."""
    try:
        return Manifest.model_validate_json((directory / MANIFEST_NAME).read_bytes())
    except (OSError, ValidationError):
        return None


def _same_mtimes(plan: CopyPlan, manifest: Manifest) -> bool:
    return [_record(f) for f in plan.files] == [
        (r.path, r.size, r.mtime_ns) for r in manifest.files
    ]


def _same_hashes(plan: CopyPlan, manifest: Manifest) -> bool:
    if [(f.path, f.size) for f in plan.files] != [(r.path, r.size) for r in manifest.files]:
        return False
    return all(
        record.sha256 is not None and sha256_of(plan.source_path(record.path)) == record.sha256
        for record in manifest.files
    )


def _record(found: PlannedFile) -> tuple[str, int, int]:
    return (found.path, found.size, found.mtime_ns)


REUSE_CHECKS: dict[str, Callable[[CopyPlan, Manifest], bool]] = {
    "mtime": _same_mtimes,
    "sha256": _same_hashes,
}
"""How a manifest is matched against the source, by the ``reuse_check`` setting."""


def is_current(plan: CopyPlan, reuse_check: str) -> bool:
    """Whether ``plan.final`` is a complete copy of the source as it is now."""
    manifest = read(plan.final)
    if manifest is None or manifest.key != plan.key or manifest.source != str(plan.source):
        return False
    if manifest.reuse_check != reuse_check or not REUSE_CHECKS[reuse_check](plan, manifest):
        return False
    return all(_intact(plan.final / record.path, record.size) for record in manifest.files)


def _intact(path: Path, size: int) -> bool:
    """The copied file is still there with its size (an engine may not shrink a copy)."""
    try:
        found = path.lstat()
    except OSError:
        return False
    return stat.S_ISREG(found.st_mode) and found.st_size == size
