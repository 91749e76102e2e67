"""Cold reads: telling cached from uncached ranges, faulting buffers in ahead of a reader,
and (optional) ``O_DIRECT``.

A 4 KiB ``RWF_NOWAIT`` probe of a range's last page tells a page-cached range from one on
disk without waiting; a probe of the whole range would start 8 MiB of readahead on a miss,
this one at most four pages. Cold, the destination's page faults cost more than the disk
here (bench/RESULTS.md, 2026-12-04 "cold loads": a buffered read into a buffer already
faulted in runs at 2.0-2.6 GB/s, into a fresh one at 0.5-1.1), so the Prefaulter takes them
on a thread of its own while the reader waits on the disk. ``O_DIRECT`` (what
runai-model-streamer does by default) skips the page cache and its copy, but was not faster
on a quiet machine and leaves the file uncached for the next load: a setting, off.
"""

from __future__ import annotations

import mmap
import os
import sys
import threading
from pathlib import Path
from types import TracebackType

ALIGN = 4096
"""O_DIRECT needs file offsets, lengths and buffer addresses aligned to the device's
logical block size; 4 KiB covers every common one, and mmap'd buffers are page-aligned."""


MADV_POPULATE_WRITE: int | None = getattr(
    mmap, "MADV_POPULATE_WRITE", 23 if sys.platform == "linux" else None
)
"""Linux 5.14's madvise that faults a range in, writable, in one call (Python 3.11's mmap
module knows the call but not the name)."""
POPULATE_STEP = 4 << 20
"""Bytes per madvise: small, because the call holds the GIL while it faults."""


def align_down(value: int) -> int:
    """``value`` rounded down to a multiple of ALIGN."""
    return value - value % ALIGN


def align_up(value: int) -> int:
    """``value`` rounded up to a multiple of ALIGN."""
    return align_down(value + ALIGN - 1)


def open_direct(path: Path) -> int | None:
    """A read-only ``O_DIRECT`` descriptor of ``path``; None where the platform or the file
    system has none (tmpfs before Linux 6.6, FUSE, macOS), so reads stay buffered."""
    flag = getattr(os, "O_DIRECT", 0)
    if not flag:
        return None
    try:
        return os.open(path, os.O_RDONLY | flag | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None


def cached(fd: int, view: memoryview, offset: int) -> bool:
    """Whether the page cache holds the last page of the ``view``-sized range of ``fd`` at
    ``offset``; that page lands in ``view`` if so. The last page, because reading a file's
    header leaves its first pages cached by readahead. Unknown (no RWF_NOWAIT, or a file
    system that refuses it) counts as cached, which keeps the buffered read."""
    nowait = getattr(os, "RWF_NOWAIT", 0)
    if not nowait or not len(view):
        return True
    last = max(0, len(view) - ALIGN)
    try:
        os.preadv(fd, [view[last:]], offset + last, nowait)
    except BlockingIOError:
        return False
    except OSError:
        return True
    return True


def read_direct(fd: int, view: memoryview, offset: int, want: int) -> int:
    """Up to ``want`` bytes of ``fd`` from ``offset`` into ``view`` with O_DIRECT; how many
    it got. ``view`` must be aligned and at least ``align_up(want)`` long. It stops early,
    leaving the rest to a buffered read, at the end of the file, at a short read that
    breaks the alignment, or where the kernel refuses the direct read (EINVAL)."""
    if offset % ALIGN or len(view) < align_up(want):
        return 0
    done = 0
    try:
        while done < want:
            got = os.preadv(fd, [view[done : align_up(want)]], offset + done)
            done += got
            if got == 0 or got % ALIGN:
                break
    except OSError:
        pass  # EINVAL and friends: the buffered read that follows reports real errors
    return min(done, want)


class Prefaulter:
    """Faults destination buffers in, front to back, on a thread of its own, while a reader
    fills them: a cold read then waits on the disk while the other core takes the page
    faults, where a reader that faults its own pages does one after the other. Racing the
    reader is harmless: a page either of them faulted in is simply present for the other."""

    def __init__(self, regions: list[mmap.mmap]) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(regions,), name="flexinfer-prefault", daemon=True
        )

    def __enter__(self) -> Prefaulter:
        if MADV_POPULATE_WRITE is not None:
            self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self, regions: list[mmap.mmap]) -> None:
        assert MADV_POPULATE_WRITE is not None
        for region in regions:
            for start in range(0, len(region), POPULATE_STEP):
                if self._stop.is_set():
                    return
                try:
                    region.madvise(
                        MADV_POPULATE_WRITE, start, min(POPULATE_STEP, len(region) - start)
                    )
                except OSError:
                    return  # a kernel before 5.14: the reader faults the pages itself
