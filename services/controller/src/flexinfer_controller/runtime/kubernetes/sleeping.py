"""Sleep and wake of engine pods, and where a sleep frees anything for another pod.

A pod keeps its device-plugin allocation (``nvidia.com/gpu: 1``) while its engine sleeps:
the scheduler still counts that GPU as taken, so on an exclusively allocated GPU a sleep
frees nothing another pod could use, and the pod is stopped instead. A sleep frees the GPU
for another pod where the node's GPUs are shared, so that the device plugin hands out more
``nvidia.com/gpu`` than there are GPUs:

* ``flexinfer.ai/gpu.sharing`` on the node: ``time-slicing`` or ``mps`` (``exclusive``:
  not shared, whatever else says); the operator or the agent sets it;
* else the NVIDIA GPU feature discovery's labels, set with the device plugin's sharing
  config: ``nvidia.com/gpu.sharing-strategy`` ``time-slicing`` or ``mps``, or
  ``nvidia.com/gpu.replicas`` above 1.

A pod that asks for no device-plugin GPU (the CPU, or Models co-scheduled by their VRAM
estimates without one) frees its memory by sleeping wherever it runs.

A sleeping pod carries ``SLEEPING_ANNOTATION`` (written before the sleep call, removed
after the wake call), so that a restarted controller still sees it asleep: it is not
published to the proxies, not counted as a live replica, and holds no GPU for a swap.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping

from flexinfer_common.errors import NotFoundError
from flexinfer_common.kube.client import KubeClient
from flexinfer_controller.adapters.kube.pods import patch_pod
from flexinfer_controller.backends import SleepEndpoints
from flexinfer_controller.runtime.engine_http import post_once
from flexinfer_controller.runtime.kubernetes.pods import SLEEPING_ANNOTATION, PodView

SHARING_LABEL = "flexinfer.ai/gpu.sharing"
"""The node's GPU sharing as the operator or agent states it: ``time-slicing``, ``mps`` or
``exclusive``."""
NVIDIA_STRATEGY_LABEL = "nvidia.com/gpu.sharing-strategy"
NVIDIA_REPLICAS_LABEL = "nvidia.com/gpu.replicas"
SHARED_STRATEGIES = frozenset({"time-slicing", "mps"})


def gpu_sharing(labels: Mapping[str, str]) -> str | None:
    """How the node's GPUs are shared between pods (``time-slicing``, ``mps``); None:
    each allocated whole to one pod."""
    stated = labels.get(SHARING_LABEL, "").strip().lower()
    if stated:
        return stated if stated in SHARED_STRATEGIES else None
    strategy = labels.get(NVIDIA_STRATEGY_LABEL, "").strip().lower()
    if strategy in SHARED_STRATEGIES:
        return strategy
    replicas = labels.get(NVIDIA_REPLICAS_LABEL, "").strip()
    return "time-slicing" if replicas.isdigit() and int(replicas) > 1 else None


def sleep_refusal(pod: PodView, labels: Mapping[str, str] | None) -> str | None:
    """Why ``pod`` may not sleep (a sleep would free nothing another pod can use); None:
    it may. ``labels``: its node's (None: the node is not known)."""
    if pod.device is None:
        return None  # no device-plugin allocation: the memory it frees is free for others
    where = f"node {pod.node}" if pod.node else "its node"
    if labels is None:
        return f"pod {pod.name} holds {pod.device}, and {where} is not known: stopped instead"
    if gpu_sharing(labels) is not None:
        return None
    return (
        f"pod {pod.name} keeps its {pod.device} allocation while asleep, and the GPUs of "
        f"{where} are not shared (no time-slicing or MPS: label {SHARING_LABEL}, or the "
        f"device plugin's {NVIDIA_STRATEGY_LABEL}): stopped instead"
    )


class PodSleep:
    """The calls that put an engine pod to sleep and wake it, and which pods sleep."""

    def __init__(self, client: KubeClient) -> None:
        self._client = client
        self._told: dict[str, bool] = {}
        """Pod key -> asleep, as this controller last made it, until the watch shows it."""
        self.waking: dict[str, float] = {}
        """Pod key -> when its wake began (monotonic), until the pod is Ready again."""

    def asleep(self, pod: PodView) -> bool:
        """Whether the pod sleeps now (or is being put to sleep)."""
        return self._told.get(pod.key, pod.sleeping)

    def seen(self, pod: PodView) -> None:
        """The watch shows the pod as it is now: what it says of its sleep is current."""
        if self._told.get(pod.key) == pod.sleeping:
            del self._told[pod.key]

    def forget(self, key: str) -> None:
        """The pod is gone."""
        self._told.pop(key, None)
        self.waking.pop(key, None)

    async def sleep(
        self, pod: PodView, routes: SleepEndpoints, level: int, timeout_s: float
    ) -> str | None:
        """Mark the pod, then POST its engine's sleep route; None once it sleeps, else what
        went wrong (the pod is then to be stopped: it may be half asleep)."""
        assert pod.url is not None  # only a ready pod is put to sleep
        try:
            await self._mark(pod, str(level))
        except NotFoundError:
            return "its pod is gone"
        self._told[pod.key] = True
        return await post_once(pod.url + routes.sleep, timeout_s, {"level": str(level)})

    async def wake(self, pod: PodView, routes: SleepEndpoints, timeout_s: float) -> str | None:
        """POST the engine's wake route, then unmark the pod; None once it woke."""
        if pod.url is None:
            return "its pod has no address"
        problem = await post_once(pod.url + routes.wake, timeout_s)
        if problem is None:
            self._told[pod.key] = False
            with contextlib.suppress(NotFoundError):
                await self._mark(pod, None)
        return problem

    async def _mark(self, pod: PodView, value: str | None) -> None:
        patch = {"metadata": {"annotations": {SLEEPING_ANNOTATION: value}}}
        await patch_pod(self._client, pod.namespace, pod.name, patch)
