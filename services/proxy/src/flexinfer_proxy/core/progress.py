"""The latest cold-start phase per model, from PROGRESS events, and waiting for changes."""

from __future__ import annotations

import asyncio

from flexinfer_common.bus.topics import ProgressEvent

QUEUED = "queued"
"""Shown before the controller reported a phase of this cold start: the request waits in
our queue."""


class ProgressBoard:
    """What each model's cold start is doing now; waiters are woken on every update."""

    def __init__(self) -> None:
        self._latest: dict[str, ProgressEvent] = {}
        self._changed: dict[str, asyncio.Future[None]] = {}

    def latest(self, model: str) -> ProgressEvent | None:
        """The last phase reported for ``model`` in its current cold start."""
        return self._latest.get(model)

    def describe(self, model: str, waited_s: float) -> str:
        """The SSE comment text for ``model``'s progress."""
        event = self._latest.get(model)
        # "ready" with no endpoint to route to is the end of an earlier start, not this one.
        if event is None or event.phase == "ready":
            return f"flexinfer cold-start phase={QUEUED} waited={waited_s:.0f}s"
        text = f"flexinfer cold-start phase={event.phase}"
        if event.progress is not None:
            text += f" progress={int(event.progress * 100)}%"
        if event.bytes_done is not None:
            total = f"/{event.bytes_total}" if event.bytes_total is not None else ""
            text += f" bytes={event.bytes_done}{total}"
        if event.eta_s is not None:
            text += f" eta={event.eta_s:.0f}s"
        return text + f" waited={waited_s:.0f}s"

    def restart(self, model: str) -> None:
        """A new cold start of ``model`` begins: phases reported before it are history."""
        self._latest.pop(model, None)

    def update(self, event: ProgressEvent) -> None:
        """Record ``event`` unless an older one (by time) than what is known."""
        known = self._latest.get(event.model)
        if known is not None and event.at < known.at:
            return
        self._latest[event.model] = event
        waiter = self._changed.pop(event.model, None)
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def changed(self, model: str) -> asyncio.Future[None]:
        """A future that resolves at the next update of ``model``."""
        waiter = self._changed.get(model)
        if waiter is None or waiter.done():
            waiter = self._changed[model] = asyncio.get_running_loop().create_future()
        return waiter

    def forget(self, keep: set[str]) -> None:
        """Drop models no longer declared."""
        for model in [m for m in self._latest if m not in keep]:
            del self._latest[model]
