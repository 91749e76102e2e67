"""Stream a log file the runtime captured: its tail, then (follow) what is appended to it.

Following waits on file-system notifications (inotify through ``watchfiles``), not on a
timer; a notification missed between a read and the watch's start is caught by the
watcher's periodic timeout, so a follower lags a write by at most ``RECHECK_MS``.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import BinaryIO

import watchfiles

from flexinfer_common.errors import NotFoundError

CHUNK = 64 * 1024
RECHECK_MS = 1000
"""How long a follower waits on notifications before it reads again anyway."""
_TAIL_BLOCK = 8192


def tail_text(path: Path, limit: int = 400) -> str:
    """The last ``limit`` bytes of the log at ``path`` on one line, for an exit message."""
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - limit))
            return fh.read().decode(errors="replace").strip().replace("\n", " | ")
    except OSError:
        return "(no log)"


def open_log(path: Path, what: str) -> BinaryIO:
    """The log file opened for reading; NotFoundError naming ``what`` if there is none."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        raise NotFoundError(f"no log for {what}: {exc.strerror}") from exc
    return os.fdopen(fd, "rb")


def seek_tail(fh: BinaryIO, lines: int) -> None:
    """Position ``fh`` at the start of its last ``lines`` lines (a final newline ends one)."""
    end = fh.seek(0, os.SEEK_END)
    if lines <= 0:
        return
    pos, found = end, 0
    while pos > 0:
        step = min(_TAIL_BLOCK, pos)
        pos -= step
        fh.seek(pos)
        block = fh.read(step)
        # A newline that is the file's last byte ends the last line; it starts nothing.
        start = len(block) - 1 if pos + len(block) == end else len(block)
        index = block.rfind(b"\n", 0, start)
        while index != -1:
            found += 1
            if found == lines:
                fh.seek(pos + index + 1)
                return
            index = block.rfind(b"\n", 0, index)
    fh.seek(0)


async def stream_log(
    path: Path, fh: BinaryIO, *, follow: bool, gone: asyncio.Event
) -> AsyncIterator[bytes]:
    """What ``fh`` (open on ``path``) holds from its position on; with ``follow``, what is
    appended too, until ``gone`` is set. Closes ``fh``."""
    try:
        for chunk in _drain(fh):
            yield chunk
        if not follow or gone.is_set():
            return
        async for _ in watchfiles.awatch(
            path,
            watch_filter=None,
            stop_event=gone,
            debounce=200,
            step=20,
            rust_timeout=RECHECK_MS,
            yield_on_timeout=True,
            recursive=False,
        ):
            for chunk in _drain(fh):
                yield chunk
        for chunk in _drain(fh):  # what the replica wrote as it exited
            yield chunk
    finally:
        fh.close()


def _drain(fh: BinaryIO) -> Iterator[bytes]:
    while chunk := fh.read(CHUNK):
        yield chunk
