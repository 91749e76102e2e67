"""What a RedisBus re-publishes when Redis loses its data (a restart without persistence).

Redis without AOF or RDB forgets every stream on a restart, including events it accepted a
moment before that no consumer had read yet. To keep delivery at-least-once across that,
each RedisBus remembers what it published in the last ``window_s`` seconds, with the *epoch*
of the Redis data set that accepted it. The epoch is a random token under one key that every
bus sharing the prefix creates if it is missing (SET NX) and reads with each publish: a
changed or re-created token means the data set that held those events is gone, so they are
published again. A Redis that keeps its data (the compose file turns AOF on) keeps the
token too, and nothing is replayed.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass

EPOCH_KEY = "bus:epoch"
"""Key (after the stream prefix) of the token naming the current Redis data set."""

CHECK_INTERVAL_S = 1.0
"""Seconds between epoch checks while there is something to replay: a process that
published and then went quiet still notices a restart within about a second, at the cost
of one GET per second, and only while its window holds events."""


@dataclass(slots=True)
class Sent:
    """One published event, and the epoch of the data set that last accepted it."""

    topic: str
    text: str
    at: float
    epoch: str


class ReplayLog:
    """Events published within the last ``window_s`` seconds, at most ``max_entries``."""

    def __init__(self, window_s: float, max_entries: int) -> None:
        if window_s < 0:
            raise ValueError("replay window must be at least 0 seconds")
        self.window_s = window_s
        self._entries: deque[Sent] = deque(maxlen=max_entries)
        self._added = asyncio.Event()

    def __len__(self) -> int:
        return len(self._entries)

    def add(self, topic: str, text: str, epoch: str) -> None:
        """Remember an accepted event (nothing, with a window of 0)."""
        if self.window_s <= 0:
            return
        self._entries.append(Sent(topic, text, time.monotonic(), epoch))
        self._added.set()

    def prune(self) -> None:
        """Forget events older than the window."""
        horizon = time.monotonic() - self.window_s
        while self._entries and self._entries[0].at < horizon:
            self._entries.popleft()
        if not self._entries:
            self._added.clear()

    def stale(self, epoch: str) -> list[Sent]:
        """Events within the window that were accepted by another data set than ``epoch``."""
        self.prune()
        return [sent for sent in self._entries if sent.epoch != epoch]

    async def wait_nonempty(self) -> None:
        """Return once the log holds an event."""
        await self._added.wait()
