"""``file://`` model sources: the one place such a name becomes a path, and is read.

:func:`resolve_file_source` decodes the URL (percent-escapes, once), checks the decoded path
is absolute and canonical (no ``.``/``..`` segment, no control character), normalises it
(``realpath``: symlinks and duplicate slashes resolved) and only then checks that the
result lies under one of the configured roots, also resolved. Nothing else decodes a file
URL, so ``%2e%2e`` or ``%2F`` can never slip past a check made on the encoded form.

Reading stays under the root too: :func:`open_beneath` opens a path relative to the root's
directory one component at a time with ``O_NOFOLLOW``, so a directory or file swapped for a
symlink after the check is refused (ELOOP / ENOTDIR) instead of followed out of the root.
A symlink inside a source is followed only to a file that itself lies under the same root
(a Hugging Face cache's ``snapshots/<sha>/x -> ../../blobs/<hash>`` stays readable).
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from urllib.parse import unquote_to_bytes

from flexinfer_common.errors import InvalidSpecError
from flexinfer_registry.core.providers.base import SourceNotAllowedError, UnsafePathError

MAX_PATH = 4096
"""PATH_MAX: longer decoded paths are refused before the filesystem sees them."""

_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
"""O_NONBLOCK: a FIFO planted in a source must not block the open forever."""


@dataclass(frozen=True)
class FileSource:
    """A ``file://`` source admitted by a root: both are real (resolved) paths."""

    root: Path
    path: Path

    @property
    def relative(self) -> PurePosixPath:
        """The source's path under its root (``.`` when it is the root itself)."""
        return PurePosixPath(self.path.relative_to(self.root).as_posix())


def _invalid(name: str, why: str) -> InvalidSpecError:
    return InvalidSpecError(f"file URL {name[:120]!r} {why}", field="model_name")


def decode_file_url(name: str) -> PurePosixPath:
    """The absolute, canonical path a ``file://`` URL names (decoded once), or InvalidSpecError."""
    scheme, sep, rest = name.partition("://")
    if not sep or scheme.lower() != "file":
        raise _invalid(name, "is not a file:// URL")
    if _CONTROL.search(name) or "?" in name or "#" in name:
        raise _invalid(name, "must not contain control characters, a query or a fragment")
    authority, slash, encoded = rest.partition("/")
    if authority.lower() not in ("", "localhost"):
        raise _invalid(name, f"must name a local path, not host {authority[:60]!r}")
    if not slash:
        raise _invalid(name, "must name an absolute path (file:///dir)")
    if _BAD_ESCAPE.search(encoded):
        raise _invalid(name, "has a malformed percent-escape")
    try:
        path = "/" + unquote_to_bytes(encoded).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _invalid(name, "decodes to a path that is not UTF-8") from exc
    if _CONTROL.search(path):
        raise _invalid(name, "decodes to a path with NUL or control characters")
    if len(path) > MAX_PATH:
        raise _invalid(name, f"decodes to a path longer than {MAX_PATH} characters")
    if any(part in (".", "..") for part in path.split("/")):
        raise _invalid(name, "decodes to a path with '.' or '..' segments")
    return PurePosixPath(path)


def resolve_file_source(name: str, roots: Sequence[Path]) -> FileSource:
    """Decode ``name``, normalise it, then check it lies under one of ``roots``.

    SourceNotAllowedError when no root admits it (always, with no roots configured).
    """
    real = Path(os.path.realpath(decode_file_url(name)))
    for root in roots:
        real_root = Path(os.path.realpath(root))
        if real.is_relative_to(real_root):
            return FileSource(real_root, real)
    if not roots:
        raise SourceNotAllowedError(
            "file:// model sources are disabled: no file roots are configured "
            "(FLEXINFER_REGISTRY_FILE_ROOTS)"
        )
    raise SourceNotAllowedError(
        f"file URL {name[:120]!r} is outside the registry's file roots "
        "(FLEXINFER_REGISTRY_FILE_ROOTS); symlinks are resolved before the check"
    )


@contextmanager
def opened_root(source: FileSource) -> Iterator[int]:
    """A directory descriptor of ``source.root`` for :func:`open_beneath`, closed after."""
    fd = os.open(source.root, _DIR_FLAGS)
    try:
        yield fd
    finally:
        os.close(fd)


def open_beneath(root_fd: int, relative: PurePosixPath, *, directory: bool) -> int:
    """Open ``relative`` (canonical, no ``..``) under ``root_fd`` without following any
    symlink on the way; UnsafePathError when one is met (the tree changed after the check).
    A file must be a regular file; the caller closes the descriptor."""
    parts = [p for p in relative.parts if p not in ("", ".")]
    if any(p == ".." for p in parts):
        raise UnsafePathError(f"refusing {str(relative)[:120]!r}: '..' in a path under a root")
    fd = os.dup(root_fd)
    try:
        for index, part in enumerate(parts):
            last = index == len(parts) - 1
            flags = _FILE_FLAGS if last and not directory else _DIR_FLAGS
            next_fd = os.open(part, flags, dir_fd=fd)
            os.close(fd)
            fd = next_fd
        if not directory and not stat.S_ISREG(os.fstat(fd).st_mode):
            raise UnsafePathError(f"refusing {str(relative)[:120]!r}: not a regular file")
    except OSError as exc:
        os.close(fd)
        raise UnsafePathError(
            f"refusing {str(relative)[:120]!r}: a symlink or a changed path under the root ({exc})"
        ) from exc
    except BaseException:
        os.close(fd)
        raise
    return fd


def list_source(source: FileSource, model_fd: int) -> dict[str, PurePosixPath]:
    """Relative name in the model -> path under the root, for every file of a directory
    source (``model_fd``); symlinks to files under the root are followed, others refused
    (SourceNotAllowedError), symlinked directories and special files skipped."""
    found: dict[str, PurePosixPath] = {}
    for dirpath, _dirs, names, dir_fd in os.fwalk(".", dir_fd=model_fd, follow_symlinks=False):
        for name in names:
            relative = PurePosixPath(dirpath, name)
            mode = os.lstat(name, dir_fd=dir_fd).st_mode
            if stat.S_ISREG(mode):
                found[str(relative)] = source.relative / relative
            elif stat.S_ISLNK(mode):
                target = Path(os.path.realpath(source.path / relative))
                if not target.is_relative_to(source.root):
                    raise SourceNotAllowedError(
                        f"{str(relative)[:120]!r} of the file source is a symlink that leads "
                        "out of the file root"
                    )
                if target.is_file():
                    found[str(relative)] = PurePosixPath(target.relative_to(source.root))
    return found
