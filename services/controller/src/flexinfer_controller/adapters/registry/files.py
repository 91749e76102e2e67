"""Write a model streamed by the registry into the controller's cache directory, safely.

Deny by default: whatever names the registry sends, a file is written only if its name is
a plain relative path (no ``..``, ``.``, empty or absolute parts, no NUL or backslash)
that ListModelFiles announced, only under a fresh temporary directory inside the cache
root, opened with O_NOFOLLOW|O_EXCL (nothing there can be a symlink: we create every
entry ourselves), and only up to its announced size. The finished directory is checked
against the listing (every file, every size) and then renamed into place in one step, so
a reader sees a complete model or none.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from flexinfer_common.errors import FlexInferError
from flexinfer_controller.adapters.registry.client import RemoteFile

MARKER = ".flexinfer-cache.json"
"""Written last into a complete model directory: the source it holds and its files."""
TMP_PREFIX = ".tmp-"
_MAX_NAME = 1024
_MAX_FILES = 100_000


class UnsafeFileError(FlexInferError):
    """The registry named or sent a file the controller refuses to write."""


def safe_name(name: str) -> PurePosixPath:
    """``name`` as a relative path inside the model directory; UnsafeFileError if not."""
    bad = (
        not name
        or len(name) > _MAX_NAME
        or "\x00" in name
        or "\\" in name
        or name.startswith("/")
        or any(ord(c) < 32 for c in name)
    )
    path = PurePosixPath(name)
    parts = name.split("/")
    if bad or any(p in ("", ".", "..") for p in parts) or parts[0] == MARKER:
        raise UnsafeFileError(f"the registry sent an unsafe file name {name[:200]!r}; refused")
    return path


@dataclass
class _Open:
    fd: int
    written: int = 0


@dataclass
class ModelWriter:
    """Receives FileChunks into ``<root>/.tmp-<dir>+<id>/``, installed as ``<root>/<dir>``
    (``+`` appears in no Model name, so one Model's leftovers never match another's)."""

    root: Path
    dirname: str
    expected: list[RemoteFile]
    tmp: Path = field(init=False)
    _sizes: dict[str, int] = field(init=False)
    _open: dict[str, _Open] = field(default_factory=dict, init=False)
    _done: set[str] = field(default_factory=set, init=False)

    def __post_init__(self) -> None:
        if len(self.expected) > _MAX_FILES:
            raise UnsafeFileError(f"the registry lists {len(self.expected)} files; refused")
        self._sizes = {}
        for remote in self.expected:
            safe_name(remote.path)
            self._sizes[remote.path] = remote.size
        self.root.mkdir(parents=True, exist_ok=True)
        self.tmp = self.root / f"{TMP_PREFIX}{self.dirname}+{uuid.uuid4().hex[:8]}"
        self.tmp.mkdir()

    @property
    def total(self) -> int:
        """Bytes the listing announced."""
        return sum(self._sizes.values())

    def write(self, name: str, offset: int, data: bytes) -> None:
        """One chunk; UnsafeFileError for a name not listed, a gap, or too many bytes."""
        relative = safe_name(name)
        size = self._sizes.get(name)
        if size is None or name in self._done:
            raise UnsafeFileError(f"the registry sent {name[:200]!r}, which it did not list")
        handle = self._open.get(name) or self._create(relative)
        if offset != handle.written or handle.written + len(data) > size:
            raise UnsafeFileError(
                f"{name[:200]!r}: chunk at {offset} (+{len(data)}) does not follow "
                f"{handle.written} of {size} bytes"
            )
        view = memoryview(data)
        while view:
            view = view[os.write(handle.fd, view) :]
        handle.written += len(data)

    def _create(self, relative: PurePosixPath) -> _Open:
        target = self.tmp.joinpath(*relative.parts)
        for parent in reversed(target.relative_to(self.tmp).parents[:-1]):
            directory = self.tmp / parent
            if directory.is_symlink():  # cannot happen: only we write here; checked anyway
                raise UnsafeFileError(f"{directory} is a symlink; refused")
            directory.mkdir(exist_ok=True)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        handle = self._open[str(relative)] = _Open(os.open(target, flags, 0o644))
        return handle

    def end_file(self, name: str) -> None:
        """The chunk with ``is_last_chunk``: close the file."""
        handle = self._open.pop(name, None)
        if handle is not None:
            os.close(handle.fd)
            self._done.add(name)

    def install(self, source: str) -> Path:
        """Check every file against the listing, write the marker, rename into place."""
        for name in list(self._open):
            self.end_file(name)
        for name, size in self._sizes.items():
            path = self.tmp.joinpath(*PurePosixPath(name).parts)
            if size == 0 and not path.exists():
                path.parent.mkdir(parents=True, exist_ok=True)
                path.touch()  # an empty file may come without a chunk
            got = path.stat().st_size if path.is_file() and not path.is_symlink() else -1
            if got != size:
                raise UnsafeFileError(f"{name[:200]!r}: received {got} bytes, listed {size}")
        files = [{"path": f.path, "size": f.size} for f in self.expected]
        marker = {"source": source, "files": files}
        (self.tmp / MARKER).write_text(json.dumps(marker, sort_keys=True))
        final = self.root / self.dirname
        old = self.root / f"{TMP_PREFIX}old-{self.dirname}+{uuid.uuid4().hex[:8]}"
        if final.exists():
            final.rename(old)  # a complete older copy (another source) steps aside
        self.tmp.rename(final)
        shutil.rmtree(old, ignore_errors=True)
        return final

    def discard(self) -> None:
        """Remove the temporary directory (a failed or cancelled transfer)."""
        for name in list(self._open):
            os.close(self._open.pop(name).fd)
        shutil.rmtree(self.tmp, ignore_errors=True)


def installed(root: Path, dirname: str, source: str) -> Path | None:
    """The complete directory holding ``source``, if one was installed (a restart reuses it)."""
    final = root / dirname
    try:
        marker = json.loads((final / MARKER).read_text())
    except (OSError, ValueError):
        return None
    return final if isinstance(marker, dict) and marker.get("source") == source else None


def remove_leftovers(root: Path, dirname: str) -> None:
    """Temporary directories of ``dirname`` left by a crash or a cancelled transfer."""
    if not root.is_dir():
        return
    for entry in root.iterdir():
        if entry.name.startswith((f"{TMP_PREFIX}{dirname}+", f"{TMP_PREFIX}old-{dirname}+")):
            shutil.rmtree(entry, ignore_errors=True)


def remove_model(root: Path, dirname: str) -> None:
    """The model's directory and leftovers (the Model was deleted)."""
    remove_leftovers(root, dirname)
    shutil.rmtree(root / dirname, ignore_errors=True)
