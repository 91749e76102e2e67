"""The reconcile's side of scale-out (core/scaleout.py holds the decision): look at the
engines' load once a tick, give the planner the count, tell it in status and metrics.

Level-triggered: each reconcile of a Model that can scale out reads its ready engines (at
most once per tick), queues its next look one tick later while any replica runs, and lets
the planner decide from the window; so the count follows the load without an event, and a
reconcile run twice, late or for no reason decides the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from flexinfer_common.api import Model, ModelStatus
from flexinfer_controller.core.metrics import ControllerMetrics
from flexinfer_controller.core.queue import WorkQueue
from flexinfer_controller.core.scaleout import ScaleOut, autoscaling_status, can_scale_out
from flexinfer_controller.runtime import Replica, ReplicaState


class NoInFlight:
    """No engine metrics: no reading, so nothing scales out."""

    async def requests_in_flight(self, url: str) -> int | None:
        """Always None."""
        return None


class Autoscaler:
    """Feeds ``ScaleOut`` from the reconcile and reports its decisions."""

    def __init__(
        self, scaleout: ScaleOut, queue: WorkQueue, metrics: ControllerMetrics | None = None
    ) -> None:
        self.scaleout = scaleout
        self._queue = queue
        self._metrics = metrics
        self._ready: dict[str, int] = {}

    async def look(self, model: Model, replicas: Sequence[Replica], path: str | None) -> None:
        """Before the plan: read ``model``'s ready engines' load (``path``: the backend's
        metrics page) and queue the next look while any replica runs."""
        key = model.key
        if not can_scale_out(model.spec):
            self._drop(key)
            return
        ready = [r for r in replicas if r.state is ReplicaState.READY and r.url]
        self._ready[key] = len(ready)
        if ready and path is not None:
            urls = [f"{(r.url or '').rstrip('/')}{path}" for r in ready]
            await self.scaleout.observe(key, urls)
        if replicas:
            self._queue.add_after(key, self.scaleout.policy.tick_s)

    def count(self, model: Model, floor: int) -> int:
        """The planner's hook: the idle rule's ``floor`` raised by the load."""
        key = model.key
        if not can_scale_out(model.spec):
            return floor
        stored = model.status.desired_replicas
        decision = self.scaleout.decide(key, model.spec, floor, self._ready.get(key, 0), stored)
        if self._metrics is not None:
            self._metrics.observe_scaling(key, decision.concurrency, decision.replicas)
        return decision.replicas

    def status(
        self, model: Model, status: ModelStatus, now: datetime, waiting: str | None
    ) -> ModelStatus:
        """``status`` with status.autoscaling (None for a Model that cannot scale out).
        ``waiting``: why a wanted replica did not start (no free GPU, a crash backoff)."""
        if not can_scale_out(model.spec):
            return status.model_copy(update={"autoscaling": None})
        decision = self.scaleout.last(model.key)
        target = model.spec.serverless_or_default.target_concurrency
        short = status.desired_replicas > status.replicas
        changed = status.desired_replicas != model.status.desired_replicas
        scaling = autoscaling_status(
            decision if status.desired_replicas > 0 else None,
            target,
            model.status.autoscaling,
            now if changed else None,
            waiting if short else None,
        )
        return status.model_copy(update={"autoscaling": scaling})

    def _drop(self, key: str) -> None:
        self.scaleout.forget(key)
        self._ready.pop(key, None)
        if self._metrics is not None:
            self._metrics.forget_scaling(key)

    def forget(self, key: str) -> None:
        """The Model is gone."""
        self._drop(key)
