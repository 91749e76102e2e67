"""Cold-start progress: which phase each model's start has reached, published on the bus.

Reconciles are level-triggered and run many times per start, so the tracker publishes a
phase only when a start moves forward. Publishing is fire-and-forget through one sender
task: the reconcile (and so activation) never waits for the bus, and events of one
controller still arrive in the order they were decided.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from datetime import datetime

from flexinfer_common.api import Model, ModelPhase, ModelStatus
from flexinfer_common.api.meta import utcnow
from flexinfer_common.bus import EventBus, topics
from flexinfer_common.errors import FlexInferError
from flexinfer_controller.core.cache import DownloadProgress
from flexinfer_controller.core.desired import desired_replicas
from flexinfer_controller.runtime import Replica

log = logging.getLogger(__name__)

_ORDER = {phase: index for index, phase in enumerate(topics.PROGRESS_PHASES)}
_MAX_BACKLOG = 1000
"""Events waiting for the sender; beyond it they are dropped (a stuck bus must not grow us)."""


@dataclass(slots=True)
class _ColdStart:
    phase: str
    percent: int | None = None
    """The download's last published whole percent, in phase ``pulling``."""


class ProgressReporter:
    """Tracks cold starts per model and publishes each new phase once, in order."""

    def __init__(self, bus: EventBus, *, source: str = "controller") -> None:
        self._bus = bus
        self._source = source
        self._starts: dict[str, _ColdStart] = {}
        self._durations: dict[str, float] = {}
        self._backlog: asyncio.Queue[topics.ProgressEvent] = asyncio.Queue(_MAX_BACKLOG)
        self._sender: asyncio.Task[None] | None = None

    def active(self, key: str) -> bool:
        """True while a cold start of ``key`` is being reported."""
        return key in self._starts

    def phase(self, key: str) -> str | None:
        """The last phase published for ``key``'s current cold start."""
        start = self._starts.get(key)
        return start.phase if start is not None else None

    def last_duration(self, key: str) -> float | None:
        """Seconds from spawn to ready of ``key``'s previous start (None: never seen)."""
        return self._durations.get(key)

    def scheduled(self, key: str) -> None:
        """The controller decided to start a replica of ``key``."""
        self._advance(key, "scheduled")

    def pulling(self, key: str, download: DownloadProgress | None = None) -> None:
        """``key`` waits for its weights (source or cache not ready); a download's progress
        is published again each time its whole percent grows."""
        start = self._starts.get(key)
        if start is None or start.phase != "pulling":
            self._advance(key, "pulling", download=download)
            start = self._starts.get(key)
            if start is not None and start.phase == "pulling" and download is not None:
                start.percent = download.percent
            return
        percent = download.percent if download is not None else None
        if percent is not None and (start.percent is None or percent > start.percent):
            start.percent = percent
            self._emit(key, "pulling", None, download)

    def loading(self, key: str) -> None:
        """An engine of ``key`` was spawned; eta from the previous start, if any."""
        self._advance(key, "loading-weights", self._durations.get(key))

    def ready(self, key: str, spawn_to_ready_s: float | None) -> None:
        """A replica of ``key`` serves: close the cold start and remember how long it took."""
        start = self._starts.pop(key, None)
        if start is None:
            return  # no start of ours (already reported, adopted, or scaled while serving)
        if start.phase == "loading-weights" and spawn_to_ready_s is not None:
            # Only a start we saw spawn gives an honest duration for the next estimate.
            self._durations[key] = max(0.0, spawn_to_ready_s)
        self._emit(key, "ready", 0.0)

    def abandon(self, key: str) -> None:
        """The start of ``key`` will not complete (scaled back to zero, failed, deleted)."""
        self._starts.pop(key, None)

    def forget(self, key: str) -> None:
        """``key`` was deleted: drop everything known about it."""
        self.abandon(key)
        self._durations.pop(key, None)

    def _advance(
        self,
        key: str,
        phase: str,
        eta_s: float | None = None,
        *,
        download: DownloadProgress | None = None,
    ) -> None:
        start = self._starts.get(key)
        if start is None:
            start = self._starts[key] = _ColdStart(phase="")
            if phase != "scheduled":
                self._emit(key, "scheduled", None)
                start.phase = "scheduled"
        if start.phase and _ORDER[phase] <= _ORDER[start.phase]:
            return
        start.phase = phase
        self._emit(key, phase, eta_s, download)

    def _emit(
        self, key: str, phase: str, eta_s: float | None, download: DownloadProgress | None = None
    ) -> None:
        fields: dict[str, object] = {
            "model": key, "phase": phase, "at": utcnow(), "eta_s": eta_s, "source": self._source,
        }  # fmt: skip
        if download is not None:
            fields.update(
                progress=download.fraction,
                bytes_done=download.bytes_done,
                bytes_total=download.bytes_total,
            )
        event = topics.ProgressEvent.model_validate(fields)
        try:
            self._backlog.put_nowait(event)
        except asyncio.QueueFull:
            log.warning("progress backlog full; dropping %s %s", key, phase)
            return
        if self._sender is None or self._sender.done():
            self._sender = asyncio.create_task(self._send(), name="controller-progress")

    async def _send(self) -> None:
        while not self._backlog.empty():
            event = self._backlog.get_nowait()
            try:
                await self._bus.publish(topics.PROGRESS, event.model_dump(mode="json"))
            except Exception as exc:  # advisory: the proxy still routes once endpoints arrive
                log.warning(
                    "could not publish progress %s of %s: %s", event.phase, event.model, exc,
                    exc_info=not isinstance(exc, FlexInferError),
                )  # fmt: skip

    async def close(self, timeout_s: float = 2.0) -> None:
        """Give queued events a moment to go out, then stop the sender."""
        sender = self._sender
        if sender is None:
            return
        done, _ = await asyncio.wait({sender}, timeout=timeout_s)
        if not done:
            sender.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sender
        self._sender = None


def report_progress(
    progress: ProgressReporter,
    model: Model,
    status: ModelStatus,
    ready: list[Replica],
    active_at: datetime | None,
    download: DownloadProgress | None,
    held: bool,
) -> None:
    """Advance the cold-start phases the proxy shows to waiting clients from one reconcile's
    outcome (``held``: the shared-GPU hook holds the Model back; no start is under way)."""
    key = model.key
    if ready:
        latest = max(ready, key=lambda r: r.ready_at or 0.0)
        took = latest.ready_at - latest.started_at if latest.ready_at is not None else None
        progress.ready(key, took)
    elif held:
        progress.abandon(key)
    elif status.phase is ModelPhase.PENDING:
        # Weights not in place: a start that is wanted waits for the pull.
        if desired_replicas(model.spec, active_at, utcnow()).replicas > 0:
            progress.pulling(key, download)
        else:
            progress.abandon(key)
    elif status.desired_replicas == 0 or status.phase is ModelPhase.FAILED:
        progress.abandon(key)
