"""Helpers every provider shares: safe relative paths, weight-file filter, verified writes."""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Iterable
from pathlib import Path, PurePosixPath

from flexinfer_common.errors import InvalidSpecError
from flexinfer_registry.core.providers.base import (
    ChecksumMismatchError,
    ProgressCallback,
    UnsafePathError,
)

WEIGHT_SUFFIXES = frozenset(
    {
        ".safetensors", ".bin", ".pt", ".pth", ".gguf", ".ckpt", ".h5", ".msgpack",
        ".onnx", ".onnx_data", ".tflite", ".ot", ".npz", ".nemo", ".engine", ".plan",
    }
)  # fmt: skip
"""File suffixes that hold weights; ``ignore_weights`` skips them (ModelExpress'
``is_weight_file``)."""

WEIGHT_GLOBS = tuple(f"*{suffix}" for suffix in sorted(WEIGHT_SUFFIXES))
"""The same set as glob patterns, for clients that filter by pattern (huggingface_hub)."""

IMAGE_SUFFIXES = frozenset({".png", ".jpg", ".jpeg", ".gif", ".svg", ".webp", ".bmp", ".ico"})


def is_weight_file(path: str) -> bool:
    """True when ``path`` names a weight file (by suffix, case-insensitive)."""
    return PurePosixPath(path).suffix.lower() in WEIGHT_SUFFIXES


def is_image(path: str) -> bool:
    """True when ``path`` names an image (model cards embed them; engines never read them)."""
    return PurePosixPath(path).suffix.lower() in IMAGE_SUFFIXES


def safe_relative_path(name: str) -> str:
    """``name`` as a normalised relative POSIX path, or :class:`UnsafePathError`.

    Rejects what could escape the model directory: empty names, NUL and other control
    characters, backslashes, absolute paths, drive letters and any ``..`` segment.
    """
    shown = repr(name[:120])
    if not name or any(ord(c) < 32 or c == "\x7f" for c in name):
        raise UnsafePathError(f"refusing file name {shown}: empty or control characters")
    if "\\" in name or name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        raise UnsafePathError(f"refusing file name {shown}: absolute or non-POSIX path")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if not parts or any(p == ".." for p in parts):
        raise UnsafePathError(f"refusing file name {shown}: it escapes the model directory")
    return "/".join(parts)


def parse_bucket_url(model_name: str, scheme: str, store: str, prefix: str) -> tuple[str, str]:
    """``<scheme>://bucket/prefix`` -> (bucket, prefix without slashes at either end).

    ``store`` ("S3") and ``prefix`` ("a key prefix") word the errors; a prefix with a
    ``..`` segment is refused, as it could name objects outside the model.
    """
    if not model_name.startswith(f"{scheme}://"):
        raise InvalidSpecError(
            f"{store} model names are {scheme}://bucket/prefix URLs, got {model_name[:120]!r}",
            field="model_name",
        )
    bucket, _, path = model_name.removeprefix(f"{scheme}://").partition("/")
    path = path.strip("/")
    if not bucket or not path or ".." in path.split("/"):
        raise InvalidSpecError(
            f"{store} model name needs a bucket and {prefix}: {model_name[:120]!r}",
            field="model_name",
        )
    return bucket, path


def target_path(dest_dir: Path, relative: str) -> Path:
    """Where ``relative`` (already checked by :func:`safe_relative_path`) lands in ``dest_dir``.

    Also refuses a path that resolves outside ``dest_dir`` through a symlink already there.
    """
    root = dest_dir.resolve()
    target = root.joinpath(relative)
    if not target.parent.resolve().is_relative_to(root):
        raise UnsafePathError(f"refusing file name {relative!r}: a symlink leads outside")
    return target


def select(names: Iterable[str], *, ignore_weights: bool) -> list[str]:
    """Safe, sorted, de-duplicated relative paths, without weights when ``ignore_weights``."""
    chosen = {safe_relative_path(n) for n in names}
    return sorted(n for n in chosen if not (ignore_weights and is_weight_file(n)))


class ProgressMeter:
    """Adds up bytes across files and reports the running total to a callback."""

    def __init__(self, callback: ProgressCallback | None, total: int | None) -> None:
        self._callback = callback
        self.total = total
        self.done = 0

    def add(self, count: int) -> None:
        """Account ``count`` more bytes and report."""
        self.done += count
        if self._callback is not None:
            self._callback(self.done, self.total)


def check_size(relative: str, actual: int, expected: int | None) -> None:
    """Raise :class:`ChecksumMismatchError` when the size differs from what was announced."""
    if expected is not None and actual != expected:
        raise ChecksumMismatchError(
            f"{relative}: size mismatch, expected {expected} bytes, got {actual}"
        )


def check_digest(relative: str, algorithm: str, actual: str, expected: str) -> None:
    """Raise :class:`ChecksumMismatchError` when two digests (any case) differ."""
    if actual.lower() != expected.lower():
        raise ChecksumMismatchError(
            f"{relative}: {algorithm} mismatch, expected {expected}, got {actual}"
        )


def sha256_file(path: Path, chunk_size: int = 1 << 20) -> str:
    """Hex SHA-256 of a local file."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(chunk_size):
            digest.update(block)
    return digest.hexdigest()


def remove_quietly(path: Path) -> None:
    """Delete a partial file; a file already gone is fine."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
