"""What a flash load copies: the source's files, checked, and the directory they go to."""

from __future__ import annotations

import fnmatch
import os
import re
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from flexinfer_common.errors import ConfigError
from flexinfer_controller.flashload.errors import FlashLoadError, UnsafeSourceError

MANIFEST_NAME = ".flexinfer-flashload.json"
"""Written last into a copy: its presence (and match) is what makes a copy complete."""

TEMP_PREFIX = ".flashload-"
"""Temporary copies and lock files start with this: a copy's final name never does."""

PAGE = 4096
"""tmpfs allocates whole pages, so each file costs its size rounded up to one."""

_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_NAMESPACE = re.compile(f"^{_LABEL}$")
_NAME = re.compile(rf"^{_LABEL}(\.{_LABEL})*$")


def safe_name(key: str) -> str:
    """``namespace/name`` (or ``name``) as one directory name: ``namespace_name``.

    Kubernetes names never contain ``_``, so the result maps back to one key only.
    """
    namespace, slash, name = key.rpartition("/")
    if (slash and not _NAMESPACE.match(namespace)) or not _NAME.match(name):
        raise ConfigError(f"model name {key!r} is not namespace/name with lowercase RFC 1123 names")
    return f"{namespace}_{name}" if namespace else name


@dataclass(frozen=True)
class PlannedFile:
    """One regular file to copy; ``path`` is relative to the source, with ``/``."""

    path: str
    size: int
    mtime_ns: int
    mode: int


@dataclass(frozen=True)
class CopyPlan:
    """Every file and directory of one model, and where the copy goes."""

    key: str
    source: Path
    dest_root: Path
    files: tuple[PlannedFile, ...]
    dirs: tuple[str, ...]
    single_file: bool = False
    """The source was one file (a GGUF, say): it is copied into the model's directory."""

    @property
    def final(self) -> Path:
        """The copy's directory: ``<dest_root>/<safe name>``."""
        return self.dest_root / safe_name(self.key)

    @property
    def total_bytes(self) -> int:
        """Bytes of all files."""
        return sum(f.size for f in self.files)

    @property
    def needed_bytes(self) -> int:
        """What the copy takes on tmpfs: every file rounded up to whole pages."""
        return sum(-(-f.size // PAGE) * PAGE for f in self.files) + PAGE * (len(self.dirs) + 1)

    def source_path(self, relative: str) -> Path:
        """Where the planned file ``relative`` is read from."""
        return self.source if self.single_file else self.source / relative

    @property
    def launch_path(self) -> Path:
        """What an engine is started with: the copy's directory, or its one file."""
        return self.final / self.files[0].path if self.single_file else self.final


def make_plan(source: Path, dest_root: Path, key: str, exclude: Sequence[str] = ()) -> CopyPlan:
    """Walk ``source``; refuse escaping symlinks and special files; skip ``exclude``."""
    root = _existing_source(source)
    dest_root = _existing_dest(dest_root)
    final = dest_root / safe_name(key)
    if final == root or root in final.parents or final in root.parents:
        raise ConfigError(f"the copy {final} and its source {root} overlap")
    top = root.stat()
    if stat.S_ISREG(top.st_mode):
        found = _planned(root, root.name, top)
        return CopyPlan(key, root, dest_root, (found,), (), single_file=True)
    if not stat.S_ISDIR(top.st_mode):
        raise UnsafeSourceError(f"model source is neither a directory nor a file: {root}")
    files: list[PlannedFile] = []
    dirs: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root, onerror=_raise):
        here = Path(dirpath)
        for name in sorted(dirnames):
            if (here / name).is_symlink():
                raise UnsafeSourceError(f"symlinked directory in the model: {here / name}")
            dirs.append((here / name).relative_to(root).as_posix())
        for name in filenames:
            relative = (here / name).relative_to(root).as_posix()
            if name == MANIFEST_NAME or _excluded(relative, exclude):
                continue
            files.append(_planned(here / name, relative, _checked_stat(root, here / name)))
    files.sort(key=lambda f: f.path)
    return CopyPlan(key, root, dest_root, tuple(files), tuple(sorted(dirs)))


def _existing_source(source: Path) -> Path:
    try:
        return source.resolve(strict=True)
    except OSError as exc:
        raise FlashLoadError(f"model source {source} cannot be read: {exc.strerror}") from exc


def _existing_dest(dest_root: Path) -> Path:
    if not dest_root.is_dir():
        raise ConfigError(f"flash-load destination {dest_root} is not a directory")
    return dest_root.resolve()


def _raise(exc: OSError) -> None:
    raise FlashLoadError(f"model source cannot be listed: {exc}") from exc


def _excluded(relative: str, patterns: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(relative, pattern) for pattern in patterns)


def _checked_stat(root: Path, path: Path) -> os.stat_result:
    """The stat of a regular file, following a symlink only when it stays inside ``root``."""
    found = path.lstat()
    if stat.S_ISLNK(found.st_mode):
        target = Path(os.path.realpath(path))
        if root not in target.parents:
            raise UnsafeSourceError(f"symlink leaves the model directory: {path} -> {target}")
        try:
            found = target.stat()
        except OSError as exc:
            raise UnsafeSourceError(f"dangling symlink in the model: {path}") from exc
    if not stat.S_ISREG(found.st_mode):
        raise UnsafeSourceError(f"not a regular file (FIFO, socket or device?): {path}")
    return found


def _planned(path: Path, relative: str, found: os.stat_result) -> PlannedFile:
    if not stat.S_ISREG(found.st_mode):
        raise UnsafeSourceError(f"not a regular file: {path}")
    return PlannedFile(relative, found.st_size, found.st_mtime_ns, stat.S_IMODE(found.st_mode))
