"""The local provider: ``file:///path/to/model`` (a directory, or one file) into the cache.

Files are hard-linked when the source is on the same filesystem (instant, no extra space)
and copied otherwise; either way each file's size is checked after it lands. Symlinks inside
the source are followed only when they stay inside the source directory.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from urllib.parse import unquote, urlsplit

from flexinfer_common.errors import InvalidSpecError, NotFoundError
from flexinfer_registry.core.providers.base import (
    BlockingProvider,
    DownloadResult,
    FileInfo,
    ProgressCallback,
    ProviderConfig,
    UnsafePathError,
)
from flexinfer_registry.core.providers.files import (
    ProgressMeter,
    check_size,
    select,
    target_path,
)


def source_path(model_name: str) -> Path:
    """The local path a ``file://`` URL (or a bare absolute path) names."""
    if model_name.startswith("file://"):
        parts = urlsplit(model_name)
        if parts.netloc not in ("", "localhost"):
            raise InvalidSpecError(
                f"file URL must name a local path, not host {parts.netloc[:60]!r}",
                field="model_name",
            )
        raw = unquote(parts.path)
    else:
        raw = model_name
    if "\x00" in raw or not raw.startswith("/"):
        raise InvalidSpecError(
            f"file model name must be an absolute path: {model_name[:120]!r}", field="model_name"
        )
    return Path(raw)


def _listing(root: Path) -> dict[str, Path]:
    """Relative name -> source file, for every regular file under ``root``."""
    if root.is_file():
        return {root.name: root}
    resolved_root = root.resolve()
    found: dict[str, Path] = {}
    for dirpath, _dirs, names in os.walk(root, followlinks=False):
        for name in names:
            path = Path(dirpath, name)
            if not path.resolve().is_relative_to(resolved_root):
                raise UnsafePathError(f"{path}: symlink points outside the model directory")
            if path.is_file():
                found[path.relative_to(root).as_posix()] = path
    return found


def _place(source: Path, target: Path) -> None:
    """Hard-link ``source`` at ``target``, or copy it when linking is impossible."""
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.exists():
        target.unlink()
    try:
        os.link(source.resolve(), target)
    except OSError:
        shutil.copyfile(source, target)


class LocalProvider(BlockingProvider):
    """Models that already sit on a local or mounted filesystem."""

    name = "file"

    def __init__(self, config: ProviderConfig | None = None) -> None:
        self._config = config or ProviderConfig()

    def download_blocking(
        self,
        model_name: str,
        revision: str | None,
        dest_dir: Path,
        ignore_weights: bool,
        progress: ProgressCallback | None,
    ) -> DownloadResult:
        """Link or copy the files under the path into ``dest_dir``."""
        root = source_path(model_name)
        if not root.exists():
            raise NotFoundError(f"local model path {str(root)[:200]!r} does not exist")
        listing = _listing(root)
        names = select(listing, ignore_weights=ignore_weights)
        sizes = {n: listing[n].stat().st_size for n in names}
        meter = ProgressMeter(progress, sum(sizes.values()))
        dest_dir.mkdir(parents=True, exist_ok=True)
        files = []
        for name in names:
            target = target_path(dest_dir, name)
            _place(listing[name], target)
            check_size(name, target.stat().st_size, sizes[name])
            meter.add(sizes[name])
            files.append(FileInfo(path=name, size=sizes[name], checksum="size"))
        return DownloadResult(resolved_revision=revision, files=tuple(files))
