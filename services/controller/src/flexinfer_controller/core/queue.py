"""A deduplicating work queue keyed by model key, as client-go's workqueue.

A key is queued at most once; a key being processed is never handed to a second worker,
and if it is added meanwhile it is queued again when the first worker is done. Delayed
adds keep only the earliest deadline per key. Everything runs on one event loop, so no
locks are needed: state changes happen between awaits.
"""

from __future__ import annotations

import asyncio
from collections import deque


class ShutDownError(Exception):
    """The queue was shut down; workers should exit."""


class WorkQueue:
    """Deduplicating FIFO of keys with delayed adds and completion waiters."""

    def __init__(self) -> None:
        self._queue: deque[str] = deque()
        self._dirty: set[str] = set()
        self._processing: set[str] = set()
        self._timers: dict[str, tuple[float, asyncio.TimerHandle]] = {}
        self._wakeup = asyncio.Event()
        self._shutdown = False
        self._tickets = 0
        self._latest: dict[str, int] = {}
        self._taken: dict[str, int] = {}
        self._finished: dict[str, int] = {}
        self._waiters: list[tuple[str, int, asyncio.Future[None]]] = []

    def add(self, key: str) -> int:
        """Queue ``key`` now; returns a ticket that ``wait_done`` can wait for."""
        self._tickets += 1
        self._latest[key] = self._tickets
        if not self._shutdown and key not in self._dirty:
            self._dirty.add(key)
            if key not in self._processing:
                self._queue.append(key)
                self._wakeup.set()
        return self._tickets

    def add_after(self, key: str, delay_s: float) -> None:
        """Queue ``key`` after ``delay_s`` seconds, unless an earlier add is already pending."""
        if delay_s <= 0:
            self.add(key)
            return
        if self._shutdown:
            return
        loop = asyncio.get_running_loop()
        when = loop.time() + delay_s
        current = self._timers.get(key)
        if current is not None:
            if current[0] <= when:
                return
            current[1].cancel()
        self._timers[key] = (when, loop.call_at(when, self._fire, key))

    def due_in(self, key: str) -> float | None:
        """Seconds until the delayed add of ``key`` fires; None when none is pending."""
        timer = self._timers.get(key)
        if timer is None:
            return None
        return timer[0] - asyncio.get_running_loop().time()

    def _fire(self, key: str) -> None:
        self._timers.pop(key, None)
        self.add(key)

    async def get(self) -> str:
        """The next key to process; raises ShutDownError once the queue is shut down."""
        while not self._queue:
            if self._shutdown:
                raise ShutDownError
            self._wakeup.clear()
            await self._wakeup.wait()
        key = self._queue.popleft()
        self._dirty.discard(key)
        self._processing.add(key)
        self._taken[key] = self._latest.get(key, 0)
        if self._queue:
            self._wakeup.set()
        return key

    def done(self, key: str) -> None:
        """Mark ``key`` processed; re-queue it if it was added while in progress."""
        self._processing.discard(key)
        finished = self._taken.pop(key, 0)
        self._finished[key] = max(finished, self._finished.get(key, 0))
        if key in self._dirty:
            self._queue.append(key)
            self._wakeup.set()
        remaining = []
        for waiter in self._waiters:
            wkey, ticket, future = waiter
            if wkey == key and ticket <= finished:
                if not future.done():
                    future.set_result(None)
            else:
                remaining.append(waiter)
        self._waiters = remaining

    async def wait_done(self, key: str, ticket: int, timeout_s: float) -> bool:
        """Wait until a processing of ``key`` that took ``ticket`` (or a later one) ends."""
        if self._shutdown:
            return False
        if self._finished.get(key, 0) >= ticket:
            return True
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiter = (key, ticket, future)
        self._waiters.append(waiter)
        try:
            await asyncio.wait_for(future, timeout_s)
        except TimeoutError:
            return False
        finally:
            if waiter in self._waiters:
                self._waiters.remove(waiter)
        return not self._shutdown

    def idle(self, key: str) -> bool:
        """Whether nothing of ``key`` is queued, being processed, or waiting on a timer."""
        return key not in self._dirty and key not in self._processing and key not in self._timers

    def __len__(self) -> int:
        return len(self._queue)

    def shut_down(self) -> None:
        """Stop handing out keys, cancel timers and release every waiter."""
        self._shutdown = True
        for _, handle in self._timers.values():
            handle.cancel()
        self._timers.clear()
        for _, _, future in self._waiters:
            if not future.done():
                future.set_result(None)
        self._wakeup.set()
