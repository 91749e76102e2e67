"""What every reconcile loop's workers share: take keys until shutdown, back off on failure.

The Model controller and the catalog loop each run their own ``WorkQueue`` with their own
workers; a key whose reconcile raises is queued again after a delay that doubles with each
failure in a row (from 0.1 s, up to a cap), or after a ``TemporaryError``'s own delay when
that is longer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from flexinfer_common.errors import FlexInferError, TemporaryError
from flexinfer_controller.core.queue import ShutDownError, WorkQueue

log = logging.getLogger(__name__)

_FIRST_DELAY_S = 0.1


class Backoff:
    """Retry delays per key: doubling with each failure in a row, capped at ``max_s``."""

    def __init__(self, max_s: float) -> None:
        self.max_s = max_s
        self._failures: dict[str, int] = {}

    def failed(self, key: str, exc: BaseException) -> float:
        """Count a failure of ``key``; the delay before its retry, in seconds."""
        delay = self.next_delay(key, exc)
        self._failures[key] = self.failures(key) + 1
        return delay

    def next_delay(self, key: str, exc: BaseException) -> float:
        """The delay ``failed(key, exc)`` will return, without counting the failure (the
        reconcile tells it in status before the worker counts)."""
        count = self.failures(key) + 1
        delay: float = min(self.max_s, _FIRST_DELAY_S * 2 ** min(count, 10))
        if isinstance(exc, TemporaryError):
            delay = max(delay, min(exc.delay, self.max_s))
        return delay

    def failures(self, key: str) -> int:
        """How many times in a row ``key`` failed so far."""
        return self._failures.get(key, 0)

    def succeeded(self, key: str) -> None:
        """``key`` reconciled: its next failure starts from the first delay again."""
        self._failures.pop(key, None)


async def run_worker(
    queue: WorkQueue,
    reconcile: Callable[[str], Awaitable[None]],
    backoff: Backoff,
    what: str,
    on_result: Callable[[bool], None] | None = None,
) -> None:
    """Reconcile keys from ``queue`` until it shuts down; a failed key is retried later.

    ``what`` names the kind in log lines; ``on_result`` hears of each outcome (for metrics).
    """
    while True:
        try:
            key = await queue.get()
        except ShutDownError:
            return
        try:
            await reconcile(key)
        except Exception as exc:  # a worker must survive any one key's failure
            delay = backoff.failed(key, exc)
            known = isinstance(exc, FlexInferError)
            log.log(logging.WARNING if known else logging.ERROR,
                    "%s %s: reconcile failed (retry in %.1fs): %s", what, key, delay, exc,
                    exc_info=not known)  # fmt: skip
            queue.add_after(key, delay)
            ok = False
        else:
            backoff.succeeded(key)
            ok = True
        finally:
            queue.done(key)
        if on_result is not None:
            on_result(ok)


class Tasks:
    """A loop's background tasks (its workers, feeds, timers): started one by one, stopped
    together."""

    def __init__(self) -> None:
        self._tasks: list[asyncio.Task[None]] = []

    def __bool__(self) -> bool:
        return bool(self._tasks)

    def spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        """Run ``coro`` as a task named ``name``."""
        self._tasks.append(asyncio.create_task(coro, name=name))

    def spawn_workers(
        self,
        count: int,
        queue: WorkQueue,
        reconcile: Callable[[str], Awaitable[None]],
        backoff: Backoff,
        what: str,
    ) -> None:
        """``count`` workers taking keys of ``queue`` (tasks named ``<what>-worker-<n>``)."""
        for index in range(count):
            self.spawn(run_worker(queue, reconcile, backoff, what), f"{what}-worker-{index}")

    async def cancel(self) -> None:
        """Cancel every task and wait until each has ended."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
