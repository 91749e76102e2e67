"""The latest cold-start phase per model, from PROGRESS events, and waiting for changes."""

from __future__ import annotations

import asyncio

from flexinfer_common.bus.topics import ProgressEvent

QUEUED = "queued"
"""Shown before the controller reported any phase: the request waits in our queue."""


class ProgressBoard:
    """What each model's cold start is doing now; waiters are woken on every update."""

    def __init__(self) -> None:
        self._latest: dict[str, ProgressEvent] = {}
        self._changed: dict[str, asyncio.Event] = {}

    def latest(self, model: str) -> ProgressEvent | None:
        """The last phase reported for ``model``."""
        return self._latest.get(model)

    def describe(self, model: str, waited_s: float) -> str:
        """The SSE comment text for ``model``'s progress."""
        event = self._latest.get(model)
        phase = event.phase if event is not None else QUEUED
        text = f"flexinfer cold-start phase={phase}"
        if event is not None and event.eta_s is not None:
            text += f" eta={event.eta_s:.0f}s"
        return text + f" waited={waited_s:.0f}s"

    def update(self, event: ProgressEvent) -> None:
        """Record ``event`` unless an older one (by time) than what is known."""
        known = self._latest.get(event.model)
        if known is not None and event.at < known.at:
            return
        self._latest[event.model] = event
        waiter = self._changed.pop(event.model, None)
        if waiter is not None:
            waiter.set()

    def forget(self, keep: set[str]) -> None:
        """Drop models no longer declared."""
        for model in [m for m in self._latest if m not in keep]:
            del self._latest[model]

    async def wait_change(self, model: str, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for an update of ``model``; True if one came."""
        waiter = self._changed.setdefault(model, asyncio.Event())
        try:
            async with asyncio.timeout(timeout_s):
                await waiter.wait()
        except TimeoutError:
            return False
        return True
