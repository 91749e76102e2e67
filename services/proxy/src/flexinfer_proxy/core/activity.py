"""Active connections per model and throttled activity events for the idle scaler."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime

from flexinfer_common.bus.topics import ActivityEvent
from flexinfer_common.errors import FlexInferError

log = logging.getLogger(__name__)

PublishActivity = Callable[[ActivityEvent], Awaitable[None]]


def activity_interval(default_s: float, idle_timeout_s: float) -> float:
    """Seconds between activity events: the default, but at most a third of the idle
    timeout, or a short idle timeout would scale down a model that is busy."""
    return max(0.001, min(default_s, idle_timeout_s / 3))


class ActivityTracker:
    """Counts open requests per model and publishes at most one event per interval."""

    def __init__(
        self,
        publish: PublishActivity,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._publish = publish
        self._clock = clock
        self._active: dict[str, int] = {}
        """Open requests per model seen; kept at 0 once idle, so the gauge reads 0."""
        self._interval: dict[str, float] = {}
        self._last_sent: dict[str, float] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def active(self, model: str) -> int:
        """Requests for ``model`` in flight now."""
        return self._active.get(model, 0)

    def begin(self, model: str, interval_s: float) -> None:
        """A request for ``model`` arrived (including ones that will wait)."""
        self._active[model] = self._active.get(model, 0) + 1
        self._interval[model] = interval_s
        self.touch(model)

    def end(self, model: str) -> None:
        """A request for ``model`` finished (or its client went away)."""
        self._active[model] = max(0, self._active.get(model, 0) - 1)

    def counts(self) -> Mapping[str, int]:
        """Open requests per model (0 for models idle now)."""
        return self._active

    def touch(self, model: str) -> None:
        """Publish an activity event for ``model`` unless one went out within its interval."""
        now = self._clock()
        last = self._last_sent.get(model)
        if last is not None and now - last < self._interval.get(model, 60.0):
            return
        self._last_sent[model] = now
        event = ActivityEvent(model=model, at=datetime.now(UTC), active=self._active.get(model, 0))
        task = asyncio.create_task(self._send(event), name=f"proxy-activity-{model}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def tick(self) -> None:
        """Called periodically: models with open requests stay active (long streams)."""
        for model in [m for m, count in self._active.items() if count]:
            self.touch(model)

    async def run(self, period_s: float) -> None:
        """Tick every ``period_s`` seconds until cancelled."""
        while True:
            await asyncio.sleep(period_s)
            self.tick()

    async def aclose(self) -> None:
        """Wait briefly for events being published, then drop the rest."""
        if self._tasks:
            _, pending = await asyncio.wait(set(self._tasks), timeout=1.0)
            for task in pending:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def _send(self, event: ActivityEvent) -> None:
        try:
            await self._publish(event)
        except FlexInferError as exc:
            log.warning("activity for %s not published: %s", event.model, exc)
