"""A deadline that moves on every request, kept with one timer handle.

A uvloop timer costs about 2 µs to arm and cancel, and the proxy's hot path would arm and
cancel one per request on each side. Here moving the deadline is an attribute store; the
one handle re-checks the latest deadline when it fires and re-arms itself only while a
deadline is still set.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class LazyTimer:
    """Calls ``expired`` once ``delay`` seconds pass after the latest ``start``, unless
    ``stop`` or ``cancel`` comes first."""

    __slots__ = ("_deadline", "_delay", "_expired", "_handle", "_loop")

    def __init__(
        self, loop: asyncio.AbstractEventLoop, delay: float, expired: Callable[[], None]
    ) -> None:
        self._loop = loop
        # One delay for every start: a new deadline is never earlier than the armed handle.
        self._delay = delay
        self._expired = expired
        self._deadline: float | None = None
        self._handle: asyncio.TimerHandle | None = None

    def start(self) -> None:
        """The deadline is ``delay`` seconds from now."""
        self._deadline = self._loop.time() + self._delay
        if self._handle is None:
            self._handle = self._loop.call_later(self._delay, self._check)

    def stop(self) -> None:
        """No deadline until the next ``start`` (the handle lapses when it fires)."""
        self._deadline = None

    def cancel(self) -> None:
        """The owner is gone: drop the handle now."""
        self._deadline = None
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _check(self) -> None:
        self._handle = None
        deadline = self._deadline
        if deadline is None:
            return
        left = deadline - self._loop.time()
        if left > 0:
            self._handle = self._loop.call_later(left, self._check)
        else:
            self._deadline = None
            self._expired()
