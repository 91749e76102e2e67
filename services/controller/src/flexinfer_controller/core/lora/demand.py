"""Requests waiting for adapters that are not preloaded: which ones, until when.

A proxy holding requests for an adapter that is not loaded sends a DemandEvent naming it,
again every few seconds while they wait. The note it leaves makes the adapter wanted on
the base Model's replicas; once an engine holds it, what the engines hold keeps it wanted
(the engines, not this note, are the record), so the note is dropped. A note nobody
fulfils (the Model never got a replica) lapses after ``ttl_s``.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class DemandNotes:
    """(Model key, adapter name) -> when a request last asked for it."""

    def __init__(self, ttl_s: float = 600.0, clock: Callable[[], float] = time.monotonic) -> None:
        self._ttl_s = ttl_s
        self._clock = clock
        self._notes: dict[tuple[str, str], float] = {}

    def note(self, model: str, adapter: str) -> None:
        """A request for ``adapter`` (served on ``model``) is waiting."""
        self._notes[(model, adapter)] = self._clock()

    def wanted(self, model: str, adapter: str) -> bool:
        """Whether a request asked for it within the last ``ttl_s``."""
        at = self._notes.get((model, adapter))
        if at is None:
            return False
        if self._clock() - at > self._ttl_s:
            del self._notes[(model, adapter)]
            return False
        return True

    def fulfilled(self, model: str, adapter: str) -> None:
        """An engine holds it now: the engines keep it wanted from here on."""
        self._notes.pop((model, adapter), None)

    def forget(self, model: str) -> None:
        """``model`` has no adapters (left)."""
        for key in [k for k in self._notes if k[0] == model]:
            del self._notes[key]
