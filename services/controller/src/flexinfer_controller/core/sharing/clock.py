"""The arbiter's only source of time: a monotonic clock in seconds, injected.

The decision core never reads the system clock, so a scripted demand trace can run it on
``ManualClock`` and assert exact swap times without sleeping.
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """Seconds on a monotonic scale; only differences mean anything."""

    def now(self) -> float:
        """The current time in seconds."""
        ...


class MonotonicClock:
    """The process's monotonic clock (what the running controller injects)."""

    def now(self) -> float:
        """``time.monotonic()``."""
        return time.monotonic()


class ManualClock:
    """A clock that moves only when told to: simulated time for traces and tests."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start

    def now(self) -> float:
        """The simulated time."""
        return self._now

    def advance(self, seconds: float) -> float:
        """Move forward ``seconds`` (never back) and return the new time."""
        if seconds < 0:
            raise ValueError("a clock does not go back")
        self._now += seconds
        return self._now
