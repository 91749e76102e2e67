"""Sleep, swaps and their Events on the Kubernetes runtime (fake apiserver, real reconciles).

Engine pods are served by stand-in engines with the reference engine's sleep routes at their
podIPs (``flexinfer_testing.sleepy_pods``). On a node whose GPUs are time-sliced an idle
Model's pod sleeps (annotated, withdrawn) and its next request wakes the same pod; on an
exclusive GPU the sleep is refused and the pod stops. A swap's winner gets no pod while the
loser's pod drains. Each swap, sleep, wake and refusal is an Event on the Model. Every wait
is on a condition.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flexinfer_common.bus import topics
from flexinfer_common.bus.memory import MemoryBus
from flexinfer_common.testing.kube_apiserver import KubeApiServer, find_crd_dir
from flexinfer_common.testing.kube_apiserver.fixtures import kube_apiserver_fixture
from flexinfer_common.testing.kube_apiserver.syncing import sync_after_changes
from flexinfer_controller.runtime.kubernetes.harness import controller, model_body
from flexinfer_controller.runtime.kubernetes.kubelet import running_kubelet
from flexinfer_controller.runtime.kubernetes.pods import SLEEPING_ANNOTATION
from flexinfer_controller.runtime.kubernetes.sleeping import gpu_sharing
from flexinfer_controller.sharing_settings import GPUSharingSettings
from flexinfer_controller.sleep_settings import SleepSettings
from flexinfer_controller.testing import demand
from flexinfer_testing.backend_servers.pods import loopback_network
from flexinfer_testing.sleepy_pods import SleepyEngines, running_sleepy_engines

apiserver = kube_apiserver_fixture([find_crd_dir(Path(__file__))])
GPU_LABELS = {
    "flexinfer.ai/gpu.vendor": "NVIDIA", "flexinfer.ai/gpu.arch": "sm_89",
    "flexinfer.ai/gpu.vram": "24Gi", "flexinfer.ai/gpu.count": "1",
}  # fmt: skip
TIME_SLICED = {"nvidia.com/gpu.sharing-strategy": "time-slicing", "nvidia.com/gpu.replicas": "4"}
SLEEP = SleepSettings(budget_mb=8192, stop_after_s=600)


@dataclass
class Cluster:
    """The fake apiserver, the pods' engines and the controller's bus."""

    api: KubeApiServer
    engines: SleepyEngines
    bus: MemoryBus

    async def demand(self, model: str) -> None:
        """A proxy queued a request for Model ``default/<model>``."""
        await self.bus.publish(topics.DEMAND, demand(f"default/{model}").model_dump(mode="json"))

    def pods(self, model: str) -> list[dict[str, Any]]:
        """The pods of Model ``model``'s Deployment."""
        found = self.api.objects("pods", "default")
        return [p for p in found if p["metadata"]["name"].startswith(f"{model}-")]

    def status(self, model: str) -> dict[str, Any]:
        """The Model's stored status."""
        return dict((self.api.get("models", "default", model) or {}).get("status") or {})

    def events(self, model: str) -> list[tuple[str, str]]:
        """(reason, message) of the Events on Model ``model`` (in no particular order)."""
        uid = (self.api.get("models", "default", model) or {})["metadata"]["uid"]
        found = [
            e for e in self.api.objects("events", "default")
            if e["involvedObject"] == {
                "apiVersion": "ai.flexinfer/v1alpha2", "kind": "Model", "name": model,
                "namespace": "default", "uid": uid,
            }
        ]  # fmt: skip
        return [(e["reason"], e["message"]) for e in found]

    def reasons(self, model: str) -> list[str]:
        """The reasons of the Events on Model ``model``."""
        return [reason for reason, _ in self.events(model)]


@contextlib.asynccontextmanager
async def cluster(
    api: KubeApiServer, node_labels: dict[str, str], **settings: Any
) -> AsyncIterator[Cluster]:
    """One GPU node ``node-1`` with ``node_labels``, the kubelet binding pods there at
    loopback podIPs, sleepy engines in the pods, and the controller."""
    node = {"kind": "Node", "metadata": {"name": "node-1", "labels": node_labels}}
    api.create("nodes", node)
    bus = MemoryBus()
    try:
        async with running_kubelet(api) as kubelet:
            kubelet.pod_network = loopback_network()
            async with running_sleepy_engines(api) as engines, controller(api, bus, **settings):
                yield Cluster(api, engines, bus)
    finally:
        await bus.close()


def gpu_model(name: str, idle: str = "300s", **gpu: Any) -> dict[str, Any]:
    """A reference Model on one NVIDIA GPU (its pod asks the device plugin for it)."""
    body = model_body(name)
    body["spec"]["gpu"] = {"vendor": "nvidia", **gpu}
    body["spec"]["serverless"] = {"idleTimeout": idle}
    return body


def test_the_node_labels_say_whether_its_gpus_are_shared() -> None:
    assert gpu_sharing(TIME_SLICED) == "time-slicing"
    assert gpu_sharing({"nvidia.com/gpu.replicas": "4"}) == "time-slicing"
    assert gpu_sharing({"nvidia.com/gpu.replicas": "1"}) is None
    assert gpu_sharing({"nvidia.com/gpu.sharing-strategy": "mps"}) == "mps"
    assert gpu_sharing({"flexinfer.ai/gpu.sharing": "MPS"}) == "mps"
    # The operator's own label wins over what the device plugin's labels say.
    assert gpu_sharing({"flexinfer.ai/gpu.sharing": "exclusive", **TIME_SLICED}) is None
    assert gpu_sharing(GPU_LABELS) is None


async def test_a_pod_on_a_time_sliced_gpu_sleeps_when_idle_and_its_next_request_wakes_it(
    apiserver: KubeApiServer,
) -> None:
    async with cluster(apiserver, {**GPU_LABELS, **TIME_SLICED}, sleep=SLEEP) as c:
        apiserver.create("models", gpu_model("tiny", idle="1s"))
        await c.demand("tiny")
        # Served, then idle for its timeout: put to sleep, not stopped.
        await apiserver.until(
            lambda a: bool(c.engines.of("tiny")) and c.engines.of("tiny")[0].asleep
        )
        (engine,) = c.engines.of("tiny")
        (pod,) = c.pods("tiny")
        assert pod["metadata"]["annotations"][SLEEPING_ANNOTATION] == "1"
        assert engine.calls == ["POST /sleep?level=1"]
        await apiserver.until(lambda a: c.status("tiny").get("residency") == "Sleeping")
        deployment = apiserver.get("deployments", "default", "tiny") or {}
        assert deployment["spec"]["replicas"] == 1  # the pod stays: it sleeps
        await apiserver.until(lambda a: "Sleeping" in c.reasons("tiny"))
        # Its next request wakes the same pod, whose annotation goes.
        await c.demand("tiny")
        await apiserver.until(lambda a: "Woken" in c.reasons("tiny"))
        assert engine.calls[:2] == ["POST /sleep?level=1", "POST /wake_up"]
        assert [p["metadata"]["name"] for p in c.pods("tiny")] == [pod["metadata"]["name"]]
        assert SLEEPING_ANNOTATION not in (c.pods("tiny")[0]["metadata"].get("annotations") or {})
        _reason, message = c.events("tiny")[c.reasons("tiny").index("Sleeping")]
        assert "put to sleep (level 1) instead of stopped" in message
        assert "on node node-1" in message


async def test_a_pod_on_an_exclusive_gpu_is_stopped_not_slept_and_the_model_says_why(
    apiserver: KubeApiServer,
) -> None:
    async with cluster(apiserver, GPU_LABELS, sleep=SLEEP) as c:
        apiserver.create("models", gpu_model("tiny", idle="1s"))
        await c.demand("tiny")
        await apiserver.until(lambda a: bool(c.engines.of("tiny")))
        (engine,) = c.engines.of("tiny")
        await apiserver.until(lambda a: not c.pods("tiny"))
        assert engine.calls == []
        await apiserver.until(lambda a: "SleepRefused" in c.reasons("tiny"))
        _, message = c.events("tiny")[c.reasons("tiny").index("SleepRefused")]
        assert "keeps its nvidia.com/gpu allocation while asleep" in message
        assert "node-1 are not shared" in message
        assert c.status("tiny").get("residency") != "Sleeping"


async def test_the_winner_of_a_swap_gets_no_pod_while_the_losers_pod_drains(
    apiserver: KubeApiServer,
) -> None:
    """Two members of a shared group on one 24 GiB GPU that fit one at a time: the winner's
    pod is made only once the loser's drained pod is gone; the swap is an Event on both."""
    sharing = GPUSharingSettings(mode="arbiter", drain_timeout_s=60, drain_poll_s=0.05)
    overlap: list[str] = []
    async with cluster(apiserver, GPU_LABELS, gpu_sharing=sharing) as c:

        def both_run() -> None:
            if c.pods("a") and c.pods("b"):
                overlap.append("a and b have pods at once")

        async with sync_after_changes(apiserver, both_run):
            shared: dict[str, Any] = {"shared": "g", "vramEstimateMB": 16000, "swapCooldown": "0s"}
            apiserver.create("models", gpu_model("a", priority=10, **shared))
            apiserver.create("models", gpu_model("b", priority=500, **shared))
            await c.demand("a")
            await apiserver.until(lambda a: c.status("a").get("phase") == "Ready")
            (loser,) = c.engines.of("a")
            loser.running = 1  # a completion still streams from a
            await c.demand("b")
            await apiserver.until(lambda a: c.status("a").get("phase") == "Preempted")
            # b holds the GPU now, and waits for a's pod: it has none of its own.
            await apiserver.until(
                lambda a: any(
                    x.get("reason") == "WaitingForSwap"
                    for x in c.status("b").get("conditions") or []
                )
            )
            assert c.pods("a")
            assert not c.pods("b")
            loser.running = 0  # the completion ended: a stops, b starts
            await apiserver.until(lambda a: c.status("b").get("phase") == "Ready")
        assert overlap == []
        assert "GPUSwap" in c.reasons("b")
        assert "Preempted" in c.reasons("a")
        _, message = c.events("a")[c.reasons("a").index("Preempted")]
        assert message == "preempted by default/b in shared GPU group 'g' (priority)"


async def test_a_restarted_controller_keeps_a_sleeping_pod_asleep_and_wakes_it_on_demand(
    apiserver: KubeApiServer,
) -> None:
    """The annotation is the state: the next controller neither publishes the sleeping pod
    nor counts it live (no second pod is made), and its next request wakes that pod."""
    apiserver.create("nodes", {"kind": "Node", "metadata": {"name": "node-1", "labels": {
        **GPU_LABELS, **TIME_SLICED}}})  # fmt: skip
    bus = MemoryBus()
    try:
        async with running_kubelet(apiserver) as kubelet:
            kubelet.pod_network = loopback_network()
            async with running_sleepy_engines(apiserver) as engines:
                c = Cluster(apiserver, engines, bus)
                async with controller(apiserver, bus, sleep=SLEEP):
                    apiserver.create("models", gpu_model("tiny", idle="1s"))
                    await c.demand("tiny")
                    await apiserver.until(lambda a: "Sleeping" in c.reasons("tiny"))
                (pod,) = c.pods("tiny")
                assert SLEEPING_ANNOTATION in pod["metadata"]["annotations"]
                async with controller(apiserver, bus, sleep=SLEEP):
                    await apiserver.until(lambda a: c.status("tiny").get("residency") == "Sleeping")
                    await c.demand("tiny")
                    await apiserver.until(lambda a: c.reasons("tiny").count("Woken") == 1)
                    (engine,) = engines.of("tiny")
                    assert engine.calls[:2] == ["POST /sleep?level=1", "POST /wake_up"]
                    names = [p["metadata"]["name"] for p in c.pods("tiny")]
                    assert names == [pod["metadata"]["name"]]
    finally:
        await bus.close()


async def test_on_a_time_sliced_gpu_the_loser_sleeps_and_the_winner_starts_once_it_does(
    apiserver: KubeApiServer,
) -> None:
    """A swap's cheap half on Kubernetes: the loser's pod drains and sleeps (it stays, its
    device-plugin share of the time-sliced GPU with it), and only then is the winner's pod
    made."""
    sharing = GPUSharingSettings(mode="arbiter", drain_timeout_s=60, drain_poll_s=0.05)
    early: list[str] = []
    labels = {**GPU_LABELS, **TIME_SLICED}
    # Room for a sleeper costed at its 16000 MB estimate (no weight files to measure here).
    sleep = SleepSettings(budget_mb=20_000, stop_after_s=600)
    async with cluster(apiserver, labels, gpu_sharing=sharing, sleep=sleep) as c:

        def awake(pod: dict[str, Any]) -> bool:
            return SLEEPING_ANNOTATION not in (pod["metadata"].get("annotations") or {})

        def winner_early() -> None:
            if c.pods("b") and any(awake(p) for p in c.pods("a")):
                early.append("b has a pod while a's is awake")

        async with sync_after_changes(apiserver, winner_early):
            shared: dict[str, Any] = {"shared": "g", "vramEstimateMB": 16000, "swapCooldown": "0s"}
            apiserver.create("models", gpu_model("a", priority=10, **shared))
            apiserver.create("models", gpu_model("b", priority=500, **shared))
            await c.demand("a")
            await apiserver.until(lambda a: c.status("a").get("phase") == "Ready")
            await c.demand("b")
            await apiserver.until(lambda a: c.status("b").get("phase") == "Ready")
        assert early == []
        (loser,) = c.engines.of("a")
        assert loser.asleep
        assert loser.calls == ["POST /sleep?level=1"]
        await apiserver.until(
            lambda a: (
                (c.status("a").get("phase"), c.status("a").get("residency"))
                == ("Preempted", "Sleeping")
            )
        )
        assert "GPUSwap" in c.reasons("b")
        assert sorted(c.reasons("a")) == ["Preempted", "Sleeping"]
