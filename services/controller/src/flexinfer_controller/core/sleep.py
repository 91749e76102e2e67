"""Sleep instead of stop (issue 13): the cheap half of a swap, and scale-to-zero's first step.

Where a Model's desired replicas fall to 0 (its idle timeout, or the shared-GPU arbiter
preempting it), its backend has sleep routes, the runtime can sleep, and the host-RAM
budget allows, one READY replica is put to sleep rather than stopped: the engine frees its
GPU memory and keeps its process. When the Model wants replicas again it is woken, if its
GPUs have room again, instead of cold-started. A sleeper is stopped after the second
timeout (``stop_after_s``), when its spec changes, when its Model is deleted, or when a
newer sleeper on the same node needs its share of the budget (least recently used first).

A runtime may refuse a replica's sleep where it would free nothing (``Runtime.sleep_refusal``:
on Kubernetes, a pod whose GPU is not shared keeps its allocation while asleep); the replica
stops instead. Sleeps, wakes and refusals are recorded as Events on the Model (``events``).
A sleeper this keeper does not know (a previous controller put it to sleep; Kubernetes keeps
that on the pod) is taken into the budget at its next reconcile, its second timeout counted
from then.
"""

from __future__ import annotations

import logging
from pathlib import Path

from flexinfer_common.api import Model
from flexinfer_common.api.operations import unloaded_at
from flexinfer_controller.backends import SleepEndpoints
from flexinfer_controller.core.events import LogEvents, ModelEvents
from flexinfer_controller.core.planner import Planner
from flexinfer_controller.core.queue import WorkQueue
from flexinfer_controller.core.sharing.clock import Clock, MonotonicClock
from flexinfer_controller.core.sleepbook import SleepBook, SleepPolicy, host_cost_mb
from flexinfer_controller.runtime import Replica, ReplicaState, Runtime

log = logging.getLogger(__name__)

_SLACK_S = 0.01
"""Reconcile just after a sleeper's second timeout so that it has passed."""


def unloaded_after(model: Model, replica: Replica) -> bool:
    """Whether ``model`` was unloaded by hand (``flexinfer.ai/unloaded-at``) since
    ``replica`` last became ready: an unload stops engines, as llama-swap's does."""
    stamp = unloaded_at(model.metadata)
    ready_at = replica.ready_at if replica.ready_at is not None else replica.started_at
    return stamp is not None and ready_at <= stamp.timestamp()


class SleepKeeper:
    """Puts replicas to sleep, wakes them and stops them, for the reconciler."""

    def __init__(
        self,
        *,
        runtime: Runtime,
        planner: Planner,
        queue: WorkQueue,
        policy: SleepPolicy,
        clock: Clock | None = None,
        events: ModelEvents | None = None,
    ) -> None:
        self._runtime = runtime
        self._planner = planner
        self._queue = queue
        self._policy = policy
        self._events: ModelEvents = events or LogEvents()
        self.book = SleepBook(policy, clock or MonotonicClock())

    def sleeping(self, key: str) -> bool:
        """Whether a replica of Model ``key`` sleeps now."""
        return bool(self._runtime.sleepers(key))

    async def tend(self, model: Model) -> None:
        """Stop ``model``'s sleepers of an older spec or past the second timeout; reconcile
        it again when the next one's timeout ends."""
        self.book.retain({r.id for r in self._runtime.sleepers()})
        generation = model.metadata.generation or 1
        for sleeper in self._runtime.sleepers(model.key):
            if sleeper.id not in self.book and self._policy.on:
                cost = host_cost_mb(self._policy, None, model.spec.gpu_or_default.vram_estimate_mb)
                self.book.add(sleeper.id, model.key, cost, sleeper.node)  # slept before us
            if sleeper.generation != generation:
                await self._stop(sleeper.id, "its spec changed")
            elif unloaded_after(model, sleeper):
                await self._stop(sleeper.id, "its Model was unloaded by hand")
        expired, next_in = self.book.due(model.key)
        for replica in expired:
            await self._stop(replica, f"asleep longer than {self._policy.stop_after_s:g}s")
        if next_in is not None:
            self._queue.add_after(model.key, next_in + _SLACK_S)

    async def spare(
        self, model: Model, to_stop: list[Replica], desired: int, model_dir: Path | None
    ) -> list[Replica]:
        """``to_stop`` less the replica put to sleep instead (only when ``model`` scales to
        zero, and one sleeper per Model: a wake brings back one replica)."""
        routes = self._routes(model)
        if desired != 0 or routes is None or self._runtime.sleepers(model.key):
            return to_stop
        generation = model.metadata.generation or 1
        candidate = next(
            (
                r
                for r in to_stop
                if r.state is ReplicaState.READY
                and r.generation == generation
                and not unloaded_after(model, r)  # an unload frees the memory: it stops
            ),
            None,
        )
        if candidate is None:
            return to_stop
        refused = self._runtime.sleep_refusal(candidate)
        if refused is not None:
            self._events.record(model.key, "SleepRefused", refused)
            return to_stop
        estimate = model.spec.gpu_or_default.vram_estimate_mb
        cost = host_cost_mb(self._policy, model_dir, estimate)
        self.book.retain({r.id for r in self._runtime.sleepers()})
        evict = self.book.admit(cost, candidate.node)
        if evict is None:
            budget = f"the sleep budget of {self._policy.budget_mb} MiB"
            self._events.record(model.key, "SleepRefused", f"{cost} MiB exceed {budget}")
            return to_stop
        for replica in evict:
            await self._stop(replica, f"the sleep budget needs room for {model.key}")
        slept = await self._runtime.sleep(
            candidate.id, routes, self._policy.level, self._policy.timeout_s
        )
        if slept is None:
            return to_stop
        self.book.add(candidate.id, model.key, cost, candidate.node)
        where = f" on node {candidate.node}" if candidate.node else ""
        self._events.record(
            model.key, "Sleeping", f"engine {candidate.id} put to sleep (level "
            f"{self._policy.level}) instead of stopped; it holds about {cost} MiB of host "
            f"RAM{where}",
        )  # fmt: skip
        self._queue.add_after(model.key, self._policy.stop_after_s + _SLACK_S)
        return [r for r in to_stop if r.id != candidate.id]

    async def wake(self, model: Model, count: int) -> list[Replica]:
        """Up to ``count`` of ``model``'s sleepers woken, READY; a sleeper whose GPUs have no
        room now (or that fails to wake) is stopped: a fresh replica starts where one fits."""
        sleepers = self._runtime.sleepers(model.key)[: max(0, count)]
        routes = self._routes(model)
        woken: list[Replica] = []
        for sleeper in sleepers:
            self.book.remove(sleeper.id)
            if routes is not None and await self._planner.fits_again(model, sleeper.gpus):
                replica = await self._runtime.wake(sleeper.id, routes, self._policy.timeout_s)
                if replica is not None:
                    woken.append(replica)
                    self._events.record(model.key, "Woken", f"engine {sleeper.id} woken")
                    continue
                await self._stop(sleeper.id, "it did not wake")
            else:
                await self._stop(sleeper.id, "its GPUs have no room for it now")
        return woken

    async def forget(self, key: str) -> None:
        """Model ``key`` is gone: stop its sleepers."""
        for sleeper in self._runtime.sleepers(key):
            await self._stop(sleeper.id, "its Model was deleted")

    def _routes(self, model: Model) -> SleepEndpoints | None:
        """The backend's sleep routes, where sleep is on and the runtime can sleep."""
        if not (self._policy.on and self._runtime.sleeps):
            return None
        backend = self._planner.backends.get(model.spec.backend)
        return backend.sleep if backend is not None else None

    async def _stop(self, replica: str, why: str) -> None:
        self.book.remove(replica)
        log.info("stopping sleeping engine %s: %s", replica, why)
        await self._runtime.stop(replica)
