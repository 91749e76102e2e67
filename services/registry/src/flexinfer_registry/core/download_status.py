"""What a download reports: status updates, their fan-out to every caller in this process,
the provider's progress, and failures as errors a client can act on."""

from __future__ import annotations

import asyncio
import errno
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from flexinfer_common.errors import FlexInferError, PermanentError
from flexinfer_registry.core.records import ModelStatus, Provider

_DISK_FULL = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
"""No space, quota exceeded, file too large (RLIMIT_FSIZE): the cache cannot take it."""


class CacheFullError(PermanentError):
    """The cache's filesystem refused the download's writes (full disk, quota, file size
    limit); the partial download is removed. RESOURCE_EXHAUSTED on the wire."""


@dataclass(frozen=True)
class StatusUpdate:
    """One ModelStatusUpdate."""

    name: str
    status: ModelStatus
    provider: Provider
    message: str | None = None
    resolved_revision: str | None = None
    error: FlexInferError | None = field(default=None, compare=False)
    """Why an ERROR happened, when this process saw it happen (a waiter on another replica
    sees only the message): the transport ends the call with its status."""

    @property
    def final(self) -> bool:
        """DOWNLOADED or ERROR: nothing follows."""
        return self.status != ModelStatus.DOWNLOADING


class Flight:
    """One in-process ensure for one key, fanned out to every subscriber."""

    def __init__(self) -> None:
        self.last: StatusUpdate | None = None
        self._queues: list[asyncio.Queue[StatusUpdate]] = []

    def emit(self, update: StatusUpdate) -> None:
        if self.last is not None and self.last.final:
            return
        if self.last == update:
            return
        self.last = update
        for queue in self._queues:
            queue.put_nowait(update)

    async def updates(self) -> AsyncIterator[StatusUpdate]:
        queue: asyncio.Queue[StatusUpdate] = asyncio.Queue()
        if self.last is not None:
            queue.put_nowait(self.last)
        self._queues.append(queue)
        try:
            while True:
                update = await queue.get()
                yield update
                if update.final:
                    return
        finally:
            self._queues.remove(queue)


class Progress:
    """The provider's progress callback; may be called from worker threads."""

    def __init__(self) -> None:
        self.done = 0
        self.total: int | None = None

    def __call__(self, done: int, total: int | None) -> None:
        self.done, self.total = done, total

    def describe(self) -> str:
        if self.total:
            percent = 100.0 * self.done / self.total
            return f"downloading: {self.done} of {self.total} bytes ({percent:.0f}%)"
        return f"downloading: {self.done} bytes"


def typed(exc: BaseException) -> FlexInferError | None:
    """The failure as one of our errors, when it says something a client can act on."""
    if isinstance(exc, FlexInferError):
        return exc
    if isinstance(exc, OSError) and exc.errno in _DISK_FULL:
        where = f" writing {exc.filename}" if exc.filename else ""
        return CacheFullError(f"the model cache has no room: {exc.strerror}{where}")
    return None


def readable(exc: BaseException) -> str:
    """One line for the status stream: the error's own message, else its type."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return text[:500] or type(exc).__name__
