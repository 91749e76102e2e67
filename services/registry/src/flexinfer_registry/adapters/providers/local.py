"""The local provider: ``file:///path/to/model`` (a directory, or one file) into the cache.

Only paths under the configured file roots are read (``ProviderConfig.file_roots``; none =
every ``file://`` name is refused): :mod:`flexinfer_registry.core.file_sources` decodes,
normalises and checks the name, and opens every file beneath the root without following a
symlink out of it. Files are hard-linked from the descriptor that was opened when the
source is on the same filesystem (instant, no extra space) and copied from it otherwise;
either way each file's size is checked after it lands.
"""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path, PurePosixPath

from flexinfer_common.errors import NotFoundError
from flexinfer_registry.core.file_sources import (
    FileSource,
    list_source,
    open_beneath,
    opened_root,
    resolve_file_source,
)
from flexinfer_registry.core.providers.base import (
    BlockingProvider,
    DownloadResult,
    FileInfo,
    ProgressCallback,
    ProviderConfig,
)
from flexinfer_registry.core.providers.files import (
    ProgressMeter,
    check_size,
    remove_quietly,
    select,
    target_path,
)

_COPY_BLOCK = 8 << 20


class LocalProvider(BlockingProvider):
    """Models that already sit on a local or mounted filesystem, under the file roots."""

    name = "file"

    def __init__(self, config: ProviderConfig | None = None) -> None:
        self._config = config or ProviderConfig()

    async def check(self, model_name: str) -> None:
        """Refuse a name outside the roots, or a source with a symlink out of its root
        (SourceNotAllowedError), or a missing one (NotFoundError); the download checks
        again as it reads."""
        await asyncio.to_thread(self._listed, model_name)

    def _listed(self, model_name: str) -> None:
        source = self._admitted(model_name)
        with opened_root(source) as root_fd:
            _listing(source, root_fd)

    def _admitted(self, model_name: str) -> FileSource:
        source = resolve_file_source(model_name, self._config.file_roots)
        if not source.path.exists():
            raise NotFoundError(f"local model path {str(source.path)[:200]!r} does not exist")
        return source

    def download_blocking(
        self,
        model_name: str,
        revision: str | None,
        dest_dir: Path,
        ignore_weights: bool,
        progress: ProgressCallback | None,
    ) -> DownloadResult:
        """Link or copy the files under the path into ``dest_dir``."""
        source = self._admitted(model_name)
        dest_dir.mkdir(parents=True, exist_ok=True)
        with opened_root(source) as root_fd:
            listing = _listing(source, root_fd)
            names = select(listing, ignore_weights=ignore_weights)
            sizes = {n: _size(root_fd, listing[n]) for n in names}
            meter = ProgressMeter(progress, sum(sizes.values()))
            files = []
            for name in names:
                target = target_path(dest_dir, name)
                fd = open_beneath(root_fd, listing[name], directory=False)
                try:
                    check_size(name, os.fstat(fd).st_size, sizes[name])
                    _place(fd, target)
                finally:
                    os.close(fd)
                check_size(name, target.stat().st_size, sizes[name])
                meter.add(sizes[name])
                files.append(FileInfo(path=name, size=sizes[name], checksum="size"))
        return DownloadResult(resolved_revision=revision, files=tuple(files))


def _size(root_fd: int, relative: PurePosixPath) -> int:
    """The size of the regular file at ``relative`` under the root."""
    fd = open_beneath(root_fd, relative, directory=False)
    try:
        return os.fstat(fd).st_size
    finally:
        os.close(fd)


def _listing(source: FileSource, root_fd: int) -> dict[str, PurePosixPath]:
    """Relative name in the model -> path under the root, for a directory or one file."""
    if not stat.S_ISDIR(os.stat(source.path).st_mode):
        return {source.path.name: source.relative}
    model_fd = open_beneath(root_fd, source.relative, directory=True)
    try:
        return list_source(source, model_fd)
    finally:
        os.close(model_fd)


def _place(source_fd: int, target: Path) -> None:
    """Hard-link the open file at ``target``, or copy it when linking is impossible."""
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_quietly(target)
    try:
        # Links the inode that was opened beneath the root, not whatever the path names now.
        os.link(f"/proc/self/fd/{source_fd}", target)
        return
    except OSError:  # another filesystem, protected_hardlinks, no /proc
        pass
    with open(target, "xb") as out:
        try:
            offset = 0
            while block := os.pread(source_fd, _COPY_BLOCK, offset):
                out.write(block)
                offset += len(block)
        except BaseException:
            remove_quietly(target)
            raise
