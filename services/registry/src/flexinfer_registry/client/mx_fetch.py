"""Copy a model the registry holds into a local cache directory (``--cache-dir``), safely.

The Kubernetes prefetch Job points the engine at ``<cache>/<provider>/<name>``; a server
download must leave the files there just as a direct one does. Deny by default: a file is
written only if its name is a plain relative path that ListModelFiles announced, only
under a fresh temporary directory beside the final one, opened O_NOFOLLOW|O_EXCL, and only
up to its listed size. The checked directory gets a completion marker and is renamed into
place in one step, so a reader sees a complete model or none. This mirrors the controller's
local-mode writer (``flexinfer_controller.adapters.registry.files``), which the registry
may not import.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path, PurePosixPath
from typing import Any

from flexinfer_registry.client.chunk_decoder import FileChunkView
from flexinfer_registry.client.mx_client import OperationFailedError

MARKER = ".flexinfer-cache.json"
"""Written last into a complete model directory: the source, revision and files it holds."""
_MAX_NAME = 1024
_MAX_FILES = 100_000
_write = os.write  # a seam for the full-disk test
_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class UnsafeFileError(OperationFailedError):
    """The registry named or sent a file the client refuses to write (exit code 1)."""


def safe_name(name: str) -> PurePosixPath:
    """``name`` as a relative path inside the model directory; UnsafeFileError if not."""
    parts = name.split("/")
    bad = (
        not name
        or len(name) > _MAX_NAME
        or "\\" in name
        or any(ord(c) < 32 for c in name)
        or any(p in ("", ".", "..") for p in parts)
        or parts[0] == MARKER
    )
    if bad:
        raise UnsafeFileError(f"the registry sent an unsafe file name {name[:200]!r}; refused")
    return PurePosixPath(name)


def marker(source: str, revision: str | None, files: Iterable[tuple[str, int]]) -> dict[str, Any]:
    """The completion marker's content."""
    listed = [{"path": p, "size": s} for p, s in sorted(files)]
    return {"source": source, "revision": revision, "files": listed}


def complete(target: Path, source: str, revision: str | None) -> bool:
    """Whether ``target`` is a complete copy of ``source`` (its marker matches, sizes agree)."""
    try:
        data = json.loads((target / MARKER).read_text())
        if data.get("source") != source or data.get("revision") != revision:
            return False
        return all((target / f["path"]).stat().st_size == f["size"] for f in data["files"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False


def copy_size(target: Path) -> int:
    """The bytes of the complete copy in ``target``, as its marker lists them."""
    data = json.loads((target / MARKER).read_text())
    return sum(int(f["size"]) for f in data["files"])


def install(staging: Path, target: Path, note: dict[str, Any]) -> None:
    """Write the marker into ``staging`` and rename it to ``target`` (replacing an old copy)."""
    (staging / MARKER).write_text(json.dumps(note, sort_keys=True))
    old = None
    if target.exists():
        old = Path(tempfile.mkdtemp(prefix=".old-", dir=target.parent))
        target.rename(old / "model")  # a stale copy steps aside; the rename stays atomic
    staging.rename(target)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def write_streamed(
    chunks: Iterable[FileChunkView], listing: dict[str, Any], target: Path, note: dict[str, Any]
) -> None:
    """Write ``chunks`` (StreamModelFiles) checked against ``listing`` into ``target``."""
    sizes = {f["path"]: int(f["size"]) for f in listing["files"]}
    if len(sizes) > _MAX_FILES:
        raise UnsafeFileError(f"the registry lists {len(sizes)} files; refused")
    for name in sizes:
        safe_name(name)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".partial-", dir=target.parent))
    try:
        _receive(chunks, sizes, staging)
        install(staging, target, note)
    finally:
        shutil.rmtree(staging, ignore_errors=True)  # gone already after a successful rename


def _receive(chunks: Iterable[FileChunkView], sizes: dict[str, int], staging: Path) -> None:
    """Every chunk at its offset; then every listed file must have its listed size."""
    written: dict[str, int] = {}
    fds: dict[str, int] = {}
    try:
        for chunk in chunks:
            name = chunk.relative_path
            relative = safe_name(name)
            size = sizes.get(name)
            if size is None:
                raise UnsafeFileError(f"the registry sent {name[:200]!r}, which it did not list")
            if name not in fds:
                fds[name] = _create(staging, relative)
            done = written.get(name, 0)
            if chunk.offset != done or done + len(chunk.data) > size:
                raise UnsafeFileError(
                    f"{name[:200]!r}: chunk at {chunk.offset} (+{len(chunk.data)}) "
                    f"does not follow {done} of {size}"
                )
            view = memoryview(chunk.data)
            while view:
                view = view[_write(fds[name], view) :]
            written[name] = done + len(chunk.data)
    finally:
        for fd in fds.values():
            os.close(fd)
    for name, size in sizes.items():
        if name not in fds and size == 0:  # an empty file may come without a chunk
            os.close(_create(staging, safe_name(name)))
        elif written.get(name, 0) != size:
            raise UnsafeFileError(f"{name[:200]!r}: received {written.get(name, 0)} bytes, "
                                  f"listed {size}")  # fmt: skip


def _create(staging: Path, relative: PurePosixPath) -> int:
    """Create a new file under ``staging`` (its parents made here, never followed links)."""
    directory = staging
    for part in relative.parts[:-1]:
        directory = directory / part
        if directory.is_symlink():  # cannot happen: only we write here; checked anyway
            raise UnsafeFileError(f"{directory} is a symlink; refused")
        directory.mkdir(exist_ok=True)
    return os.open(directory / relative.parts[-1], _FLAGS, 0o644)
