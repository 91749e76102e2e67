"""Artifact manifests (p2p.proto's ArtifactManifest): a directory of generated files, such
as a torch.compile or Triton cache, cut into chunks with a CRC32C each.

A chunk never spans two files. Checksums are CRC32C as eight lowercase hex digits, per
chunk and per whole file, and ``artifact_id`` is the SHA-256 of the manifest's compact
JSON form, as ModelExpress computes them, so either side can check the other's manifest.
Only regular files under the root are published; a symlink is followed only when it
resolves to a regular file inside the root (deny by default).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import google_crc32c

log = logging.getLogger(__name__)

MANIFEST_VERSION = 1
"""The only manifest layout p2p.proto's ArtifactManifest has had (ModelExpress's too)."""

ARTIFACT_ID = re.compile(r"[0-9a-f]{64}")
"""An artifact id is a SHA-256 in hex: anything else (a path, '..') is refused unread."""


class UnsafeManifestError(ValueError):
    """A manifest that must not be served or installed: a path escaping its root, sizes
    over the limits, or chunks that do not tile their files."""


@dataclass(frozen=True)
class ArtifactLimits:
    """What a manifest may hold (ArtifactSettings documents the defaults)."""

    max_total_bytes: int = 64 << 30
    max_files: int = 100_000
    max_chunk_bytes: int = 4 << 30


@dataclass(frozen=True)
class ArtifactFile:
    """One file: its path relative to the artifact root, size and whole-file CRC32C."""

    path: str
    size: int
    checksum: str


@dataclass(frozen=True)
class ArtifactChunk:
    """A byte range of one file and its CRC32C."""

    index: int
    file_index: int
    offset: int
    length: int
    checksum: str


@dataclass(frozen=True)
class ArtifactManifest:
    """Files and chunks of one sealed artifact."""

    mx_source_type: int
    chunk_size: int
    files: tuple[ArtifactFile, ...]
    chunks: tuple[ArtifactChunk, ...]
    manifest_version: int = MANIFEST_VERSION
    artifact_id: str = field(init=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "artifact_id", _artifact_id(self))

    @property
    def total_size(self) -> int:
        """Bytes over all files."""
        return sum(f.size for f in self.files)


def crc32c_hex(data: bytes) -> str:
    """CRC32C of ``data`` as eight lowercase hex digits."""
    return f"{google_crc32c.value(data):08x}"


def safe_relative_path(path: str) -> PurePosixPath:
    """``path`` as a relative POSIX path inside a root; UnsafeManifestError otherwise."""
    pure = PurePosixPath(path)
    if (
        not path
        or "\x00" in path
        or "\\" in path
        or pure.is_absolute()
        or any(part in ("..", ".", "") for part in path.split("/"))
    ):
        raise UnsafeManifestError(f"artifact path {path[:200]!r} is not a plain relative path")
    return pure


def build_manifest(
    root: Path, mx_source_type: int, chunk_size: int, limits: ArtifactLimits
) -> tuple[ArtifactManifest, list[Path]]:
    """The manifest of the files under ``root`` and the real path of each, in order."""
    if not 0 < chunk_size <= limits.max_chunk_bytes:
        raise UnsafeManifestError(f"chunk size {chunk_size} outside 1..{limits.max_chunk_bytes}")
    real_root = root.resolve(strict=True)
    if not real_root.is_dir():
        raise UnsafeManifestError(f"artifact root {root} is not a directory")
    found = _servable_files(real_root)
    if len(found) > limits.max_files:
        raise UnsafeManifestError(f"{len(found)} files under {root}, over {limits.max_files}")
    if (total := sum(p.stat().st_size for _, p in found)) > limits.max_total_bytes:
        raise UnsafeManifestError(f"{total} bytes under {root}, over {limits.max_total_bytes}")
    files: list[ArtifactFile] = []
    chunks: list[ArtifactChunk] = []
    for file_index, (relative, real) in enumerate(found):
        whole, pieces = _checksums(real, chunk_size)
        files.append(ArtifactFile(relative, sum(length for _, length, _ in pieces), whole))
        for offset, length, checksum in pieces:
            chunks.append(ArtifactChunk(len(chunks), file_index, offset, length, checksum))
    manifest = ArtifactManifest(mx_source_type, chunk_size, tuple(files), tuple(chunks))
    return manifest, [real for _, real in found]


def validate_manifest(manifest: ArtifactManifest, limits: ArtifactLimits) -> None:
    """Refuse a manifest (from a peer) with unsafe paths, absurd sizes or bad chunking."""
    if manifest.manifest_version != MANIFEST_VERSION:
        raise UnsafeManifestError(f"unknown manifest version {manifest.manifest_version}")
    if not 0 < manifest.chunk_size <= limits.max_chunk_bytes:
        raise UnsafeManifestError(f"chunk size {manifest.chunk_size} outside the limit")
    if len(manifest.files) > limits.max_files:
        raise UnsafeManifestError(f"{len(manifest.files)} files, over {limits.max_files}")
    if manifest.total_size > limits.max_total_bytes:
        raise UnsafeManifestError(f"{manifest.total_size} bytes, over {limits.max_total_bytes}")
    paths = [safe_relative_path(f.path) for f in manifest.files]
    if len(set(paths)) != len(paths):
        raise UnsafeManifestError("an artifact path repeats")
    named = set(paths)
    for path in paths:
        if any(parent in named for parent in path.parents):
            raise UnsafeManifestError(f"artifact path {str(path)!r} nests inside a file")
    _check_tiling(manifest)


def check_counts(
    file_count: int, chunk_count: int, total_size: int, chunk_size: int, limits: ArtifactLimits
) -> None:
    """Refuse announced counts no honest manifest has, before fetching its tables."""
    if not 0 < chunk_size <= limits.max_chunk_bytes:
        raise UnsafeManifestError(f"chunk size {chunk_size} outside 1..{limits.max_chunk_bytes}")
    if file_count > limits.max_files or total_size > limits.max_total_bytes:
        raise UnsafeManifestError(f"{file_count} files of {total_size} bytes, over the limits")
    if chunk_count > file_count + total_size // chunk_size:
        raise UnsafeManifestError(
            f"{chunk_count} chunks for {total_size} bytes in {file_count} files"
        )


def _check_tiling(manifest: ArtifactManifest) -> None:
    """Chunks in index order cover each file exactly, in order, within chunk_size."""
    covered = [0] * len(manifest.files)
    for expected, chunk in enumerate(manifest.chunks):
        if chunk.index != expected or not 0 <= chunk.file_index < len(manifest.files):
            raise UnsafeManifestError(f"chunk {chunk.index} is out of order or has no file")
        if chunk.offset != covered[chunk.file_index] or not 0 < chunk.length <= (
            manifest.chunk_size
        ):
            raise UnsafeManifestError(f"chunk {chunk.index} does not continue its file")
        covered[chunk.file_index] += chunk.length
    for file, size in zip(manifest.files, covered, strict=True):
        if size != file.size:
            raise UnsafeManifestError(f"chunks cover {size} of {file.path!r}'s {file.size} bytes")


def _servable_files(real_root: Path) -> list[tuple[str, Path]]:
    """(relative path, real path) of every regular file the root may serve, sorted."""
    found: list[tuple[str, Path]] = []
    for dirpath, dirnames, filenames in os.walk(real_root, followlinks=False):
        dirnames.sort()
        for name in sorted(filenames):
            path = Path(dirpath) / name
            real = path.resolve()
            if not real.is_relative_to(real_root) or not real.is_file():
                log.warning("not serving %s: it leaves the artifact root or is not a file", path)
                continue
            found.append((path.relative_to(real_root).as_posix(), real))
    return found


def _checksums(path: Path, chunk_size: int) -> tuple[str, list[tuple[int, int, str]]]:
    """The whole file's CRC32C and (offset, length, CRC32C) of each chunk."""
    whole = 0
    pieces: list[tuple[int, int, str]] = []
    with path.open("rb") as handle:
        offset = 0
        while data := handle.read(chunk_size):
            whole = google_crc32c.extend(whole, data)
            pieces.append((offset, len(data), crc32c_hex(data)))
            offset += len(data)
    return f"{whole:08x}", pieces


def _artifact_id(manifest: ArtifactManifest) -> str:
    document = {
        "manifest_version": manifest.manifest_version,
        "mx_source_type": manifest.mx_source_type,
        "chunk_size": manifest.chunk_size,
        "files": [
            {"file_index": i, "path": f.path, "size": f.size, "checksum": f.checksum}
            for i, f in enumerate(manifest.files)
        ],
        "chunks": [
            {
                "chunk_index": c.index,
                "file_index": c.file_index,
                "file_offset": c.offset,
                "length": c.length,
                "checksum": c.checksum,
            }
            for c in manifest.chunks
        ],
    }
    canonical = json.dumps(document, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()
