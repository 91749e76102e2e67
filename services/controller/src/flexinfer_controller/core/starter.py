"""Starting a Model's replicas: crash backoff, GPU assignment, the pre-start step, launch.

The reconciler decides how many replicas to add; ``ReplicaStarter`` adds up to that many
and says why it stopped short (a GPU is taken, a crash backoff runs, the runtime refused),
as the verdict's ``waiting`` text the Model's status shows.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace

from flexinfer_common.api import Model
from flexinfer_common.errors import FlexInferError
from flexinfer_controller.backends import LaunchSpec
from flexinfer_controller.core.crashes import CrashTracker
from flexinfer_controller.core.gpu import GPUAssignment, Unplaced
from flexinfer_controller.core.metrics import ControllerMetrics
from flexinfer_controller.core.planner import Plan, Planner
from flexinfer_controller.core.prestart import PreStart, PreStartRefusedError
from flexinfer_controller.core.queue import WorkQueue
from flexinfer_controller.core.status import Verdict
from flexinfer_controller.runtime import Replica, Runtime

log = logging.getLogger(__name__)


class ReplicaStarter:
    """Starts replicas of a planned Model on the runtime."""

    def __init__(
        self,
        *,
        planner: Planner,
        runtime: Runtime,
        crashes: CrashTracker,
        queue: WorkQueue,
        prestart: PreStart,
        metrics: ControllerMetrics | None,
        traced: Callable[[str], str | None],
    ) -> None:
        self._planner = planner
        self._runtime = runtime
        self._crashes = crashes
        self._queue = queue
        self._prestart = prestart
        self._metrics = metrics
        self._traced = traced
        """The traceparent of a Model's traced scale-up, which its new engines join."""

    async def start(self, model: Model, plan: Plan, count: int) -> tuple[list[Replica], Verdict]:
        """Up to ``count`` new replicas, and the verdict (``waiting`` says why fewer)."""
        generation = model.metadata.generation or 1
        verdict = plan.verdict
        now = time.monotonic()
        delay = self._crashes.restart_delay(model.key, generation, now)
        if delay > 0:
            self._queue.add_after(model.key, delay)
            return [], replace(verdict, waiting=f"restarting after a crash in {delay:.1f}s")
        started: list[Replica] = []
        assert plan.launch is not None  # the reconciler starts only what has a launch
        rendering = plan.launch.template_hash  # the pre-start step's relaunch lacks it
        spec: LaunchSpec | None = None
        for _ in range(count):
            gpus = await self._planner.assign(model)
            if isinstance(gpus, Unplaced):  # the GPUs are taken: it starts when one frees
                return started, replace(verdict, waiting=gpus.message)
            try:
                spec = spec or replace(
                    await self._prepared(model, plan),
                    trace_parent=self._traced(model.key),
                    template_hash=rendering,
                )
                replica = await self._runtime.start(model.key, generation, _pinned(spec, gpus))
            except PreStartRefusedError:
                raise  # the Model goes Failed: the same step would refuse it again
            except FlexInferError as exc:
                log.warning("cannot start an engine for %s: %s", model.key, exc)
                self._crashes.record(model.key, generation, now, str(exc))
                self._queue.add_after(
                    model.key, self._crashes.restart_delay(model.key, generation, now)
                )
                return started, replace(verdict, waiting=str(exc))
            started.append(replica)
            if self._metrics is not None:
                self._metrics.engine_starts.labels(model.spec.backend).inc()
        return started, verdict

    async def _prepared(self, model: Model, plan: Plan) -> LaunchSpec:
        """The launch after the pre-start step, re-rendered when it moved the model."""
        assert plan.launch is not None
        if plan.model_dir is None:
            return plan.launch
        model_dir = await self._prestart.prepare(model, plan.model_dir)
        if model_dir == plan.model_dir:
            return plan.launch
        return self._planner.relaunch(model, plan, model_dir)


def _pinned(spec: LaunchSpec, gpus: GPUAssignment | None) -> LaunchSpec:
    """The launch of one replica on ``gpus`` (None: as rendered)."""
    return spec if gpus is None else replace(spec, gpus=gpus)
