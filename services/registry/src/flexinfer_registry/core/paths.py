"""Sanitising what clients name: model names, cache keys and file paths inside the cache.

A model name is never used as a path: :func:`model_dir_name` turns it into one flat,
hashed directory name. File paths a client asks for are checked lexically (no ``..``,
absolute paths, NUL, backslashes) and then resolved, so a symlink that points out of the
model directory is refused too. Every violation is an :class:`InvalidSpecError`, which the
gRPC edge answers with INVALID_ARGUMENT and REST with 400, before anything is written.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path, PurePosixPath

from flexinfer_common.errors import InvalidSpecError
from flexinfer_registry.core.identity import MAX_MODEL_NAME, IdentityLimits, model_name_problem

MAX_PATH_LENGTH = 4096

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_UNSAFE_CHARS = re.compile(r"[^A-Za-z0-9._-]+")


def _shown(text: str) -> str:
    """A short, printable rendering of hostile input for error messages."""
    return repr(text[:80])


def check_model_name(name: str, max_chars: int = IdentityLimits.model_name_chars) -> str:
    """``name`` unchanged if it is a safe model name, else InvalidSpecError.

    The rule is :func:`~flexinfer_registry.core.identity.model_name_problem`'s: visible
    ASCII, relative unless a URL (``s3://bucket/prefix``, ``file:///abs/dir``), and no
    ``.``/``..`` segments. A ``file://`` name is checked again once decoded
    (:mod:`.file_sources`).
    """
    problem = model_name_problem(name, max_chars)
    if problem is not None:
        raise InvalidSpecError(f"model_name {problem}", field="model_name")
    return name


def cache_key(name: str, revision: str | None, ignore_weights: bool) -> str:
    """The registry record key of one download: model name, pinned revision, weight mode.

    A metadata-only download (``ignore_weights``) and a pinned revision get their own
    records, as the modelexpress client expects, so neither is mistaken for the other.
    """
    key = check_model_name(name, MAX_MODEL_NAME)
    if revision:
        if _CONTROL.search(revision) or len(revision) > 256:
            raise InvalidSpecError(f"invalid revision {_shown(revision)}", field="revision")
        key += f"@{revision}"
    if ignore_weights:
        key += "#no-weights"
    return key


def model_dir_name(key: str) -> str:
    """A flat directory name for a cache key: readable prefix plus a hash (no collisions)."""
    readable = _UNSAFE_CHARS.sub("--", key).strip(".-")[:80] or "model"
    digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{readable}-{digest}"


def check_relative_path(path: str) -> str:
    """``path`` normalised (POSIX, no leading ``./``) if it stays inside its root."""
    if not path or len(path) > MAX_PATH_LENGTH:
        raise InvalidSpecError(f"invalid file path {_shown(path)}", field="path")
    if _CONTROL.search(path) or "\\" in path:
        raise InvalidSpecError(
            f"file path contains NUL, control characters or a backslash: {_shown(path)}",
            field="path",
        )
    pure = PurePosixPath(path)
    if pure.is_absolute():
        raise InvalidSpecError(f"file path must be relative: {_shown(path)}", field="path")
    if any(part == ".." for part in pure.parts):
        raise InvalidSpecError(f"file path must not contain '..': {_shown(path)}", field="path")
    normal = str(pure)
    if normal in ("", "."):
        raise InvalidSpecError(f"invalid file path {_shown(path)}", field="path")
    return normal


def resolve_inside(root: Path, relative: str) -> Path:
    """``root/relative`` after checking it, its symlinks included, stays inside ``root``."""
    normal = check_relative_path(relative)
    real_root = root.resolve()
    target = (root / normal).resolve()
    if target != real_root and real_root not in target.parents:
        raise InvalidSpecError(
            f"file path leaves the model directory (symlink?): {_shown(relative)}", field="path"
        )
    return target
