"""The kubernetes runtime's side of sleep: which pods sleep, and their sleep and wake calls
(``sleeping`` says where a sleep frees anything, and how a pod is marked asleep)."""

from __future__ import annotations

import builtins
import logging
import time

from flexinfer_controller.backends import SleepEndpoints
from flexinfer_controller.runtime.base import Replica, ReplicaEvent, ReplicaListener, Runtime
from flexinfer_controller.runtime.kubernetes.inventory import NodeInventory
from flexinfer_controller.runtime.kubernetes.pods import PodView
from flexinfer_controller.runtime.kubernetes.replicas import Wanted, as_replica, as_sleeper
from flexinfer_controller.runtime.kubernetes.sleeping import PodSleep, sleep_refusal

log = logging.getLogger(__name__)


class PodSleepers(Runtime):
    """Sleep, wake and the sleepers, over the pods the runtime watches."""

    sleeps = True
    _pods: dict[str, PodView]
    _wanted: dict[str, Wanted]
    _ready_at: dict[str, float]
    _stopping: set[str]
    _listener: ReplicaListener
    _nodes: NodeInventory
    _sleep: PodSleep

    def sleepers(self, model: str | None = None) -> builtins.list[Replica]:
        """Sleeping pods (not stopping, deleted or failed), of one model or all."""
        pods = [p for p in self._pods.values() if model is None or p.model == model]
        asleep = [p for p in pods if self._sleep.asleep(p) and self._serves(p)]
        return [as_sleeper(p, self._wanted.get(p.model)) for p in asleep]

    def sleep_refusal(self, replica: Replica) -> str | None:
        """Why the pod may not sleep (it would free nothing: see ``sleeping``), or None."""
        pod = self._pods.get(replica.id)
        if pod is None:
            return f"pod {replica.id} is not known"
        return sleep_refusal(pod, self._nodes.labels(pod.node))

    def gpu_busy(self, model: str) -> bool:
        """Whether a pod of ``model`` may still hold its GPU: live, or stopping and not yet
        deleted; asleep or failed ones do not."""
        pods = [p for p in self._pods.values() if p.model == model and not p.failed]
        return bool(self.list(model)) or any(not self._sleep.asleep(p) for p in pods)

    async def sleep(
        self, replica_id: str, routes: SleepEndpoints, level: int, timeout_s: float
    ) -> Replica | None:
        """Annotate the ready pod and POST its engine's sleep route (``sleeping``)."""
        pod = self._pods.get(replica_id)
        if pod is None or pod.url is None or not pod.ready or not self._serves(pod):
            return None
        if self._sleep.asleep(pod) or sleep_refusal(pod, self._nodes.labels(pod.node)):
            return None
        began = time.monotonic()
        problem = await self._sleep.sleep(pod, routes, level, timeout_s)
        if problem is not None:
            log.warning("pod %s did not sleep: POST %s %s", replica_id, routes.sleep, problem)
            return None
        log.info("pod %s of %s sleeps (level %d)", replica_id, pod.model, level)
        replica = as_sleeper(pod, self._wanted.get(pod.model))
        self._listener(ReplicaEvent("slept", replica, took_s=time.monotonic() - began))
        return replica

    async def wake(
        self, replica_id: str, routes: SleepEndpoints, timeout_s: float
    ) -> Replica | None:
        """POST the engine's wake route; READY once the pod is Ready (a ``ready`` event)."""
        pod = self._pods.get(replica_id)
        if pod is None or not self._sleep.asleep(pod) or not self._serves(pod):
            return None
        began = time.monotonic()
        problem = await self._sleep.wake(pod, routes, timeout_s)
        pod = self._pods.get(replica_id)
        if problem is not None or pod is None:
            log.warning("pod %s did not wake: POST %s %s", replica_id, routes.wake, problem)
            return None
        log.info("pod %s of %s woke", replica_id, pod.model)
        if not (pod.ready and pod.url):  # its readiness probe failed while it slept
            self._sleep.waking[pod.key] = began
            return as_replica(pod, self._wanted.get(pod.model), None)
        self._ready_at[pod.key] = time.time()
        replica = as_replica(pod, self._wanted.get(pod.model), self._ready_at[pod.key])
        self._listener(ReplicaEvent("ready", replica, took_s=time.monotonic() - began))
        return replica

    def _serves(self, pod: PodView) -> bool:
        return not pod.deleting and not pod.failed and pod.key not in self._stopping

    def _live(self, model: str) -> builtins.list[PodView]:
        pods = [p for p in self._pods.values() if p.model == model and self._serves(p)]
        return [p for p in pods if not self._sleep.asleep(p)]

    def _asleep(self, model: str) -> builtins.list[PodView]:
        pods = [p for p in self._pods.values() if p.model == model and self._serves(p)]
        return [p for p in pods if self._sleep.asleep(p)]
