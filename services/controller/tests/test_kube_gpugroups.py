"""GPUGroups on Kubernetes (fake apiserver): a GPUGroup of two ModelDeployments, bridged to
Models, is one arbiter group with the GPUGroup's thresholds; the proxies' queue annotations
on it are the demand; its status is written back. The arbiter runs on a simulated clock and
is asked as the reconcile asks it; every wait is on a condition."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flexinfer_common.api.status import GPUStatus
from flexinfer_common.testing.kube_apiserver import KubeApiServer, find_crd_dir
from flexinfer_common.testing.kube_apiserver.fixtures import kube_apiserver_fixture
from flexinfer_controller.adapters.kube.deployments import deployment_bridge
from flexinfer_controller.adapters.kube.gpugroups import gpugroup_loop
from flexinfer_controller.adapters.kube.store import KubernetesModelStore
from flexinfer_controller.core.sharing.arbiter import SharedArbiter
from flexinfer_controller.core.sharing.clock import ManualClock
from flexinfer_controller.core.sharing.demand import DemandBook
from flexinfer_controller.core.sharing.gpugroups import GPUGroupSource, GPUGroupWiring
from flexinfer_controller.core.sharing.groups import ChainedGroups, SharedGroups
from flexinfer_controller.core.sharing.policy import shared_policy
from flexinfer_controller.kube_settings import KubernetesSettings
from flexinfer_controller.runtime.kubernetes import rbac
from flexinfer_controller.runtime.kubernetes.factory import kubernetes_models
from flexinfer_controller.runtime.kubernetes.harness import running_cluster
from flexinfer_controller.settings import ControllerSettings
from flexinfer_controller.sharing_settings import GPUSharingSettings
from flexinfer_controller.testing import eventually

apiserver = kube_apiserver_fixture([find_crd_dir(Path(__file__))])
GPU = GPUStatus(node="n1", device="0", vendor="nvidia", memory_mb=24576)


def deployment(name: str, **spec: Any) -> dict[str, Any]:
    """A ModelDeployment on one NVIDIA GPU."""
    return {
        "apiVersion": "ai.flexinfer/v1alpha1",
        "kind": "ModelDeployment",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "backend": "reference",
            "model": f"file:///var/lib/flexinfer/models/{name}",
            "resources": {"limits": {"nvidia.com/gpu": "1"}},
            **spec,
        },
    }


PAIR: dict[str, Any] = {
    "apiVersion": "ai.flexinfer/v1alpha1",
    "kind": "GPUGroup",
    "metadata": {"name": "pair", "namespace": "default"},
    "spec": {
        "models": [{"name": "a", "priority": 10}, {"name": "b", "priority": 500}],
        "antiThrashing": {"requestQueueThreshold": 3, "hysteresisWindowSeconds": 10},
    },
}


NO_WAIT = {"minimumRunDurationSeconds": 0, "hysteresisWindowSeconds": 0}
"""Anti-thrashing that lets a queue of 3 swap at once (the controller's clock is real)."""


@dataclass
class Setup:
    """The arbiter, its GPUGroup loop and the ModelDeployment bridge on the apiserver."""

    api: KubeApiServer
    store: KubernetesModelStore
    clock: ManualClock
    arbiter: SharedArbiter
    wiring: GPUGroupWiring
    requeued: list[str] = field(default_factory=list)

    async def replicas(self, name: str, desired: int = 1) -> int:
        """What a reconcile of Model ``name`` runs now."""
        found = await self.store.get_model("default", name)
        return (await self.arbiter.arbitrate(found, GPU, desired)).replicas

    def annotate(self, depth: int | None) -> None:
        """A proxy writes its queue for b on the GPUGroup (None: removes it)."""
        since = "2026-12-03T12:00:00Z" if depth is not None else None
        value = str(depth) if depth is not None else None
        patch = {"flexinfer.ai/queue.b": value, "flexinfer.ai/queue-since.b": since}
        self.api.patch("gpugroups", "default", "pair", {"metadata": {"annotations": patch}})

    async def seen(self, depth: int | None) -> None:
        """Until the loop's index holds that annotation (and re-queued the members)."""
        self.requeued.clear()

        def holds() -> bool:
            group = self.wiring.index.get("default/pair")
            annotations = group.metadata.annotations if group else {}
            return (
                annotations.get("flexinfer.ai/queue.b")
                == (str(depth) if depth is not None else None)
                and "default/b" in self.requeued
            )

        await eventually(holds)

    def status(self) -> dict[str, Any]:
        """The GPUGroup's stored status."""
        return dict((self.api.get("gpugroups", "default", "pair") or {}).get("status") or {})


@contextlib.asynccontextmanager
async def running(api: KubeApiServer) -> AsyncIterator[Setup]:
    """The bridge and the GPUGroup loop running on ``api``; Models a and b bridged."""
    kube = KubernetesSettings(host=api.url, namespaces=["default"])
    settings = ControllerSettings(
        runtime="kubernetes", kubernetes=kube, data_dir=Path("/nonexistent")
    )
    async with kubernetes_models(settings) as (store, _):
        assert isinstance(store, KubernetesModelStore)
        clock = ManualClock()
        demand = DemandBook(clock)
        wiring = GPUGroupWiring()
        source = GPUGroupSource(wiring.index, store, demand, history=wiring.history)
        groups = ChainedGroups([source, SharedGroups(shared_policy())], shared_policy())
        arbiter = SharedArbiter(clock=clock, demand=demand, groups=groups)
        wiring.source, wiring.arbiter, wiring.clock = source, arbiter, clock
        setup = Setup(api, store, clock, arbiter, wiring)
        bridge = deployment_bridge(store.client, ["default"], informers=store.informers)
        loop = gpugroup_loop(
            store.client, ["default"], store.informers, store, wiring, setup.requeued.append
        )
        assert loop is not None
        await bridge.start()
        await loop.start()
        try:
            for name in ("a", "b"):
                api.create("modeldeployments", deployment(name))
            api.create("gpugroups", PAIR)
            await api.until(lambda a: len(a.objects("models", "default")) == 2)
            await eventually(lambda: wiring.index.get("default/pair") is not None)
            yield setup
        finally:
            await loop.stop()
            await bridge.stop()


async def test_the_gpugroup_thresholds_decide_and_its_status_says_so(
    apiserver: KubeApiServer,
) -> None:
    async with running(apiserver) as setup:
        assert await setup.replicas("a") == 1
        assert await setup.replicas("b", desired=0) == 0
        await eventually(lambda: setup.status().get("activeModel") == "a")
        assert [m["state"] for m in setup.status()["modelStatuses"]] == ["Active", "Idle"]

        setup.clock.advance(60.0)  # past a's minimum run duration
        setup.arbiter.demand.served("default/a")  # a is busy: only priority preempts it
        setup.annotate(2)
        await setup.seen(2)
        setup.clock.advance(30.0)
        assert await setup.replicas("b") == 0  # 2 queued < threshold 3, however long
        setup.annotate(None)
        await setup.seen(None)
        assert await setup.replicas("b", desired=0) == 0
        setup.annotate(3)
        await setup.seen(3)
        assert await setup.replicas("b") == 0  # 3 queued, not yet for the 10 s hysteresis

        def queued_three() -> bool:
            # One read for both: a status with the state but not yet the new count (a
            # patch retried after a 409) must not be read as the answer.
            status = setup.status()["modelStatuses"][1]
            return bool(status.get("state") == "Queued" and status.get("queuedRequests") == 3)

        await eventually(queued_three)

        setup.clock.advance(10.5)
        assert await setup.replicas("b") == 1
        assert await setup.replicas("a") == 0

        def swapped() -> bool:
            status = setup.status()
            return status.get("swapCount") == 1 and status.get("activeModel") == "b"

        await eventually(swapped)
        status = setup.status()
        assert status["phase"] == "Swapping"  # b's Model is not Ready yet
        assert status["lastSwapReason"] == "priority: b preempted a"
        assert status["lastSwapTime"]
        a = status["modelStatuses"][0]
        assert (a["name"], a["state"], a["preemptedBy"]) == ("a", "Preempted", "b")
    used = {(c.group, c.rbac_resource, c.verb) for c in apiserver.calls}
    grouped = {g for g in rbac.grants() if g[1] in rbac.GROUPED}
    assert {g for g in used if g[1] in rbac.GROUPED} == grouped  # exactly its RBAC rows


async def test_a_model_left_out_of_the_gpugroup_runs_what_it_wants(
    apiserver: KubeApiServer,
) -> None:
    async with running(apiserver) as setup:
        assert await setup.replicas("a") == 1
        assert await setup.replicas("b") == 0  # a holds the GPU (no demand to preempt)
        spec = {"models": [{"name": "a"}]}
        setup.api.patch("gpugroups", "default", "pair", {"spec": spec})

        def left() -> bool:
            group = setup.wiring.index.get("default/pair")
            return group is not None and len(group.spec.models) == 1

        await eventually(left)
        assert "default/b" in setup.requeued
        assert await setup.replicas("b") == 1


async def test_the_running_controller_swaps_a_gpugroup_on_its_queue_annotation(
    apiserver: KubeApiServer,
) -> None:
    """create_app with sharing on, one 1-GPU node: one member of the GPUGroup takes the
    GPU, the other waits (Queued); a queue of 3 written on the GPUGroup (as a proxy writes
    it, with no bus event) swaps them, and the status follows."""
    gpu_labels = {"vendor": "NVIDIA", "arch": "sm_89", "vram": "24Gi", "count": "1"}
    labels = {f"flexinfer.ai/gpu.{k}": v for k, v in gpu_labels.items()}
    apiserver.create("nodes", {"kind": "Node", "metadata": {"name": "gpu-1", "labels": labels}})
    # Nothing serves at these pods' IPs, so a drain could not read them and would last its
    # whole grace: the loser stops at once, and the winner's pod is made once it is gone.
    immediate = {"preemptionPolicy": "Immediate"}
    group = {**PAIR, "spec": {**PAIR["spec"], "antiThrashing": NO_WAIT, "scalingPolicy": immediate}}
    async with running_cluster(apiserver, gpu_sharing=GPUSharingSettings(mode="arbiter")):
        for name in ("a", "b"):
            apiserver.create("modeldeployments", deployment(name, minReplicas=1))
        apiserver.create("gpugroups", group)

        def states(api: KubeApiServer) -> dict[str, str]:
            status = (api.get("gpugroups", "default", "pair") or {}).get("status") or {}
            return {m["name"]: m.get("state", "") for m in status.get("modelStatuses") or []}

        def phase(api: KubeApiServer) -> str:
            return str(
                ((api.get("gpugroups", "default", "pair") or {}).get("status") or {}).get("phase")
            )

        await apiserver.until(
            lambda a: sorted(states(a).values()) == ["Active", "Queued"] and phase(a) == "Active"
        )
        holder = next(n for n, s in states(apiserver).items() if s == "Active")
        waiter = next(n for n, s in states(apiserver).items() if s == "Queued")
        queue = {f"flexinfer.ai/queue.{waiter}": "3", f"flexinfer.ai/queue-since.{waiter}": "x"}
        apiserver.patch("gpugroups", "default", "pair", {"metadata": {"annotations": queue}})
        await apiserver.until(lambda a: states(a) == {holder: "Preempted", waiter: "Active"})
        await apiserver.until(lambda a: phase(a) == "Active")
        status = (apiserver.get("gpugroups", "default", "pair") or {})["status"]
        assert (status["activeModel"], status["swapCount"]) == (waiter, 1)
        assert status["lastSwapReason"].endswith(f"{waiter} preempted {holder}")
        model = apiserver.get("models", "default", holder) or {}
        assert model["status"]["phase"] == "Preempted"
