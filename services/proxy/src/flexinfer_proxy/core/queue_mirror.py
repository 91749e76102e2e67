"""The proxy's queues written where a controller without the bus reads them.

On Kubernetes the seed's proxy signals demand on the apiserver itself: a v1alpha1 model of a
GPUGroup gets the annotations ``flexinfer.ai/queue.<model>`` (depth) and
``flexinfer.ai/queue-since.<model>`` (RFC3339) on its GPUGroup, and a v1alpha2 Model a
fresh ``status.lastActiveTime``. ``QueueMirror`` follows each Model's queue depth (the
``ColdStartQueue``'s ``on_depth``) and hands the changes to a ``QueueSink`` (the apiserver:
``adapters.kube_queue``) rate-limited: one write per change of (depth, since), at most one
per ``interval_s`` per Model; a burst of requests is one write, and the queue's end (depth 0)
is always written. The bus's DemandEvents are sent as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

from flexinfer_common.errors import FlexInferError

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class QueueState:
    """Requests waiting for a Model, and since when (None while none wait)."""

    depth: int
    since: datetime | None


_EMPTY = QueueState(0, None)


class QueueSink(Protocol):
    """Where queue states are written."""

    async def write(self, model: str, state: QueueState) -> None:
        """Write Model ``model``'s (namespace/name) queue state; FlexInferError on failure."""
        ...

    async def aclose(self) -> None:
        """Release what it holds."""
        ...


class QueueMirror:
    """Each Model's queue, written to ``sink`` once per change, at most every ``interval_s``."""

    def __init__(
        self,
        sink: QueueSink,
        interval_s: float,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._sink = sink
        self._interval_s = interval_s
        self._now = now
        self._wanted: dict[str, QueueState] = {}
        self._written: dict[str, QueueState] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}

    def depth(self, model: str, depth: int) -> None:
        """``model``'s queue holds ``depth`` requests now (called on every change)."""
        if ":" in model:
            return  # a LoRA adapter's queue: its base Model's demand is the bus's to tell
        old = self._wanted.get(model)
        if depth <= 0:
            state = QueueState(0, None)
        elif old is not None and old.since is not None:
            state = QueueState(depth, old.since)
        else:
            state = QueueState(depth, self._now().replace(microsecond=0))
        self._wanted[model] = state
        task = self._tasks.get(model)
        if (task is None or task.done()) and state != self._written.get(model, _EMPTY):
            self._tasks[model] = asyncio.create_task(self._write_loop(model), name=f"queue-{model}")

    async def aclose(self) -> None:
        """Stop the writers (what they had not written is lost) and close the sink."""
        for task in self._tasks.values():
            task.cancel()
        for task in self._tasks.values():
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self._sink.aclose()

    async def _write_loop(self, model: str) -> None:
        while True:
            state = self._wanted[model]
            if state == self._written.get(model, _EMPTY):
                return
            try:
                await self._sink.write(model, state)
                self._written[model] = state
            except FlexInferError as exc:
                log.warning("queue of %s not written to the apiserver (retrying): %s", model, exc)
            # The rate limit: the changes made meanwhile go out together in the next write.
            await asyncio.sleep(self._interval_s)
