"""How one byte range of a file is copied: the interface every copy syscall implements."""

from __future__ import annotations

import errno
from typing import Protocol

from flexinfer_controller.flashload.errors import FlashLoadError

UNSUPPORTED = frozenset({errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP})
"""What a kernel answers when a syscall cannot copy between this pair of filesystems
(copy_file_range across filesystem types since Linux 5.19 is EXDEV, for one)."""


class UnsupportedError(Exception):
    """This copier cannot copy between these two files; another one may."""


class RangeCopier(Protocol):
    """Copies ``length`` bytes at ``offset`` of one file to the same offset of another."""

    name: str

    def copy(self, src: int, dst: int, offset: int, length: int) -> None:
        """Copy the range; raise :class:`UnsupportedError` if the kernel refuses the pair."""
        ...


def unsupported_or(exc: OSError) -> Exception:
    """Classify an ``OSError`` of a copy syscall: unsupported pair, or a real failure."""
    if exc.errno in UNSUPPORTED:
        return UnsupportedError(str(exc))
    return FlashLoadError(f"copy failed: {exc.strerror or exc}")


def source_shrank(offset: int) -> FlashLoadError:
    """The error for end-of-file before the planned size: the source changed under us."""
    return FlashLoadError(
        f"a source file ended at byte {offset}, before its planned size "
        "(it changed during the copy)"
    )
