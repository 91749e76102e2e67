"""The on-disk model cache: complete models only, installed by one atomic rename.

Layout under the cache root::

    models/<dir>/manifest.json   what was installed: key, files and sizes, revision
    models/<dir>/files/...       the model's files, exactly as the provider wrote them
    .tmp/<dir>.<random>/         downloads in progress (never served)
    .tmp/trash.<random>/         replaced or evicted models, being deleted

A download lands in ``.tmp`` and is renamed into ``models`` only once complete, so a crash
leaves at worst a ``.tmp`` folder (removed later by :meth:`ModelCache.clean_tmp`), never a
half model that looks installed. :meth:`ModelCache.load` re-checks every file's size, so
files deleted behind the registry's back are noticed instead of served. All methods block
(filesystem calls): async callers run them in a worker thread.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from stat import S_ISREG

from flexinfer_registry.core.paths import check_relative_path, model_dir_name, resolve_inside

MANIFEST = "manifest.json"
FILES = "files"
_COMMIT = re.compile(r"^[0-9a-fA-F]{40}$")
_SHA256 = re.compile(r"^sha256:[0-9a-f]{64}$")


@dataclass(frozen=True)
class CachedFile:
    """One file of a cached model."""

    path: str
    size: int


@dataclass(frozen=True)
class CachedModel:
    """A complete, verified model in the cache."""

    key: str
    name: str
    root: Path
    files: tuple[CachedFile, ...]
    snapshot: str
    """40 hex digits naming this exact content: the provider's commit when it has one (HF),
    the first 40 of an OCI manifest's ``sha256:`` digest, else a digest of the file list.
    modelexpress clients require such a commit hash."""
    resolved_revision: str | None
    ignore_weights: bool

    @property
    def files_dir(self) -> Path:
        """The folder holding the model's files."""
        return self.root / FILES

    @property
    def total_size(self) -> int:
        """Sum of the file sizes in bytes."""
        return sum(f.size for f in self.files)

    def path_of(self, relative: str) -> Path:
        """The on-disk path of one file, refusing anything outside the model folder."""
        return resolve_inside(self.files_dir, relative)


def snapshot_id(key: str, files: tuple[CachedFile, ...], resolved_revision: str | None) -> str:
    """The model's 40-hex snapshot id (see :attr:`CachedModel.snapshot`)."""
    if resolved_revision and _COMMIT.match(resolved_revision):
        return resolved_revision.lower()
    if resolved_revision and _SHA256.match(resolved_revision):
        return resolved_revision[7:47]  # a prefix the manifest digest is recognisable by
    listing = json.dumps([key, [[f.path, f.size] for f in files]], separators=(",", ":"))
    return hashlib.sha1(listing.encode(), usedforsecurity=False).hexdigest()


class ModelCache:
    """Complete models under ``root``; see the module docstring for the layout."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.models_dir = root / "models"
        self.tmp_dir = root / ".tmp"
        # key -> (manifest inode, mtime_ns, size), model: a manifest already parsed.
        self._parsed: dict[str, tuple[tuple[int, int, int], CachedModel]] = {}

    def load_known(self, key: str, max_files: int = 64) -> CachedModel | None:
        """:meth:`load` without parsing: only for a manifest parsed before and unchanged since
        (same inode, mtime and size), re-checking every file's size by stat. None means "not
        known to be complete": ask :meth:`load`. Cheap enough for an event loop."""
        known = self._parsed.get(key)
        if known is None or len(known[1].files) > max_files:
            return None
        signature, model = known
        try:
            stat = (model.root / MANIFEST).stat()
            if (stat.st_ino, stat.st_mtime_ns, stat.st_size) != signature:
                return None
            for item in model.files:
                path = model.files_dir / item.path
                # lstat: a file swapped for a symlink is judged by the slow, resolving path.
                found = path.lstat()
                if not S_ISREG(found.st_mode) or found.st_size != item.size:
                    return None
        except OSError:
            return None
        return model

    def model_root(self, key: str) -> Path:
        """Where the model with cache key ``key`` is (or would be) installed."""
        return self.models_dir / model_dir_name(key)

    def staging(self, key: str) -> Path:
        """A fresh, empty staging folder for one download; the provider writes ``<it>/files``."""
        self.tmp_dir.mkdir(parents=True, exist_ok=True)
        path = self.tmp_dir / f"{model_dir_name(key)}.{uuid.uuid4().hex[:12]}"
        (path / FILES).mkdir(parents=True)
        return path

    def install(
        self,
        key: str,
        name: str,
        staging: Path,
        resolved_revision: str | None,
        ignore_weights: bool,
    ) -> CachedModel:
        """Write the manifest of what ``staging`` holds and rename it into place atomically."""
        files = _walk(staging / FILES)
        manifest = {
            "key": key,
            "name": name,
            "files": [{"path": f.path, "size": f.size} for f in files],
            "snapshot": snapshot_id(key, files, resolved_revision),
            "resolved_revision": resolved_revision,
            "ignore_weights": ignore_weights,
            "installed_at": time.time(),
        }
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=1), encoding="utf-8")
        target = self.model_root(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        self._discard(target)
        os.rename(staging, target)
        loaded = self.load(key)
        if loaded is None:  # pragma: no cover - only if the disk changes under us
            raise OSError(f"installed model {key!r} failed verification")
        return loaded

    def load(self, key: str) -> CachedModel | None:
        """The installed model if its manifest is present and every file has its size."""
        root = self.model_root(key)
        try:
            manifest_stat = (root / MANIFEST).stat()
            manifest = json.loads((root / MANIFEST).read_text(encoding="utf-8"))
            files = tuple(CachedFile(str(f["path"]), int(f["size"])) for f in manifest["files"])
            if manifest.get("key") != key:
                return None
            for item in files:
                path = resolve_inside(root / FILES, item.path)
                stat = path.stat()
                if not path.is_file() or stat.st_size != item.size:
                    return None
        except (OSError, ValueError, KeyError, TypeError):
            return None
        except Exception:  # InvalidSpecError: a manifest naming a path outside the model
            return None
        model = CachedModel(
            key=key,
            name=str(manifest.get("name", key)),
            root=root,
            files=files,
            snapshot=str(manifest["snapshot"]),
            resolved_revision=manifest.get("resolved_revision"),
            ignore_weights=bool(manifest.get("ignore_weights", False)),
        )
        signature = (manifest_stat.st_ino, manifest_stat.st_mtime_ns, manifest_stat.st_size)
        self._parsed[key] = (signature, model)
        return model

    def disk_size(self, key: str) -> int:
        """Bytes of the regular files in the model's folder, manifest included (0 if absent)."""
        total = 0
        for dirpath, _dirs, names in os.walk(self.model_root(key), followlinks=False):
            for name in names:
                try:
                    found = os.lstat(os.path.join(dirpath, name))
                except OSError:  # removed while we walked
                    continue
                if S_ISREG(found.st_mode):
                    total += found.st_size
        return total

    def remove(self, key: str) -> bool:
        """Delete an installed model (renamed away first, so readers never see half of it)."""
        self._parsed.pop(key, None)
        return self._discard(self.model_root(key))

    def remove_staging(self, staging: Path) -> None:
        """Delete a staging folder that will not be installed."""
        shutil.rmtree(staging, ignore_errors=True)

    def clean_tmp(self, older_than_s: float, now: float | None = None) -> int:
        """Delete staging and trash folders untouched for ``older_than_s`` (crashed downloads)."""
        if not self.tmp_dir.is_dir():
            return 0
        cutoff = (time.time() if now is None else now) - older_than_s
        removed = 0
        for entry in self.tmp_dir.iterdir():
            try:
                if entry.stat().st_mtime < cutoff:
                    shutil.rmtree(entry, ignore_errors=True)
                    removed += 1
            except OSError:
                continue
        return removed

    def _discard(self, path: Path) -> bool:
        if not path.exists():
            return False
        self.tmp_dir.mkdir(parents=True, exist_ok=True)
        trash = self.tmp_dir / f"trash.{uuid.uuid4().hex[:12]}"
        os.rename(path, trash)
        shutil.rmtree(trash, ignore_errors=True)
        return True


def _walk(root: Path) -> tuple[CachedFile, ...]:
    """Every regular file under ``root`` (symlinks are not followed), sorted by path."""
    found: list[CachedFile] = []
    for dirpath, _dirs, names in os.walk(root, followlinks=False):
        for name in names:
            path = Path(dirpath, name)
            if path.is_symlink() or not path.is_file():
                continue
            relative = check_relative_path(path.relative_to(root).as_posix())
            found.append(CachedFile(relative, path.stat().st_size))
    return tuple(sorted(found, key=lambda f: f.path))
