"""v1alpha1 GPUGroups in the arbiter (core/sharing/gpugroups.py, groups.py): the members a
GPUGroup lists form one group gated by its own ``spec.antiThrashing`` (read from the
resource), ``gpu.shared`` groups keep the v1alpha2 policy, demand comes from the GPUGroup's
queue annotations, and the status the GPUGroup shows (legacy/gpugroup/status.py). All on a
simulated clock, against the SQL store (sqlite)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from flexinfer_common.api import Model
from flexinfer_common.api.gpugroup import GPUGroup
from flexinfer_common.api.status import GPUStatus, ModelPhase
from flexinfer_common.settings import StoreSettings
from flexinfer_common.store import ModelStore, create_store
from flexinfer_controller.core.sharing.arbiter import SharedArbiter
from flexinfer_controller.core.sharing.clock import ManualClock
from flexinfer_controller.core.sharing.demand import DemandBook
from flexinfer_controller.core.sharing.gpugroups import (
    GPUGroupIndex,
    GPUGroupSource,
    group_name,
)
from flexinfer_controller.core.sharing.groups import ChainedGroups, SharedGroups
from flexinfer_controller.core.sharing.policy import shared_policy
from flexinfer_controller.legacy.gpugroup.status import group_status

GROUP = "gpugroup:default/pair"
GPU = GPUStatus(node="n1", device="0", vendor="nvidia", memory_mb=24576)
T0 = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)


def model(name: str, **gpu: Any) -> Model:
    """An nvidia Model (as the bridge writes a ModelDeployment's), priority 100."""
    spec = {
        "backend": "reference",
        "source": f"file:///m/{name}",
        "gpu": {"vendor": "nvidia", **gpu},
    }
    return Model.model_validate({"metadata": {"name": name, "namespace": "default"}, "spec": spec})


def gpugroup(annotations: dict[str, str] | None = None, **anti: Any) -> GPUGroup:
    """GPUGroup ``pair``: a (priority 10) and b (priority 500, 20000 MB)."""
    members = [
        {"name": "a", "priority": 10},
        {"name": "b", "priority": 500, "vramEstimateMB": 20000},
    ]
    return GPUGroup.model_validate(
        {
            "metadata": {"name": "pair", "namespace": "default", "annotations": annotations or {}},
            "spec": {"models": members, "antiThrashing": anti},
        }
    )


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[ModelStore]:
    """A sqlite store holding Models a, b and the ``gpu.shared`` Models x, y."""
    made = create_store(StoreSettings(url=f"sqlite:///{tmp_path}/store.db"))
    await made.open()
    try:
        for found in (model("a"), model("b"), model("x", shared="s"), model("y", shared="s")):
            await made.create_model(found)
        yield made
    finally:
        await made.close()


class Setup:
    """An arbiter over GPUGroups (``index``) and ``gpu.shared`` groups, on ``clock``."""

    def __init__(self, store: ModelStore) -> None:
        self.clock = ManualClock()
        self.store = store
        self.index = GPUGroupIndex()
        demand = DemandBook(self.clock)
        self.source = GPUGroupSource(self.index, store, demand)
        shared = SharedGroups(shared_policy())
        self.groups = ChainedGroups([self.source, shared], shared_policy())
        self.arbiter = SharedArbiter(
            clock=self.clock, demand=demand, policy=shared_policy(), groups=self.groups
        )

    async def replicas(self, name: str, desired: int = 1) -> int:
        """What a reconcile of Model ``name`` now runs."""
        found = await self.store.get_model("default", name)
        return (await self.arbiter.arbitrate(found, GPU, desired)).replicas

    def annotate(self, depth: int) -> None:
        """The proxy wrote ``depth`` requests queued for b on the GPUGroup."""
        annotations = {"flexinfer.ai/queue.b": str(depth), "flexinfer.ai/queue-since.b": "x"}
        self.index.put(gpugroup(annotations if depth else {}))


async def test_each_group_gets_its_own_policy(store: ModelStore) -> None:
    setup = Setup(store)
    setup.index.put(gpugroup(requestQueueThreshold=4, hysteresisWindowSeconds=7))
    a = await setup.groups.group_of(await store.get_model("default", "a"))
    x = await setup.groups.group_of(await store.get_model("default", "x"))
    assert a is not None
    assert x is not None
    assert (a.group, x.group) == (GROUP, "s")
    policy = setup.groups.policy(GROUP)
    assert (policy.name, policy.queue_threshold, policy.hysteresis_s) == ("gpugroup", 4, 7.0)
    assert (policy.swap_cooldown_s, policy.preemption_cooldown_s) == (30.0, 60.0)
    assert setup.groups.policy("s") == shared_policy()
    # The member's entry overrides the Model's priority and VRAM estimate.
    b = await setup.groups.group_of(await store.get_model("default", "b"))
    assert b is not None
    assert (b.model.spec.gpu_or_default.priority, b.model.spec.gpu_or_default.vram_estimate_mb) == (
        500,
        20000,
    )
    assert [m.key for m in await setup.groups.members(GROUP) or []] == ["default/a", "default/b"]


async def test_a_model_the_gpugroup_no_longer_lists_leaves_it(store: ModelStore) -> None:
    setup = Setup(store)
    setup.index.put(gpugroup())
    assert await setup.replicas("a") == 1
    setup.index.remove("default/pair")
    assert await setup.groups.group_of(await store.get_model("default", "a")) is None
    assert await setup.replicas("b") == 1  # no group: it runs what it wants


async def test_the_gpugroup_thresholds_gate_a_swap(store: ModelStore) -> None:
    """Queue threshold 3 and hysteresis 10 s from the resource; minimum run 30 s."""
    setup = Setup(store)
    setup.index.put(gpugroup())
    assert await setup.replicas("a") == 1  # a takes the free GPU
    assert await setup.replicas("b", desired=0) == 0
    setup.clock.advance(60.0)  # a ran its minimum run duration
    setup.annotate(2)
    assert await setup.replicas("b") == 0  # 2 < 3: b waits
    setup.clock.advance(100.0)
    setup.annotate(2)
    assert await setup.replicas("b") == 0  # however long it waits
    setup.annotate(0)
    assert await setup.replicas("b", desired=0) == 0
    setup.arbiter.demand.served("default/a")  # a is busy: only priority may preempt it
    setup.annotate(3)
    assert await setup.replicas("b") == 0  # 3 queued, but not for 10 s yet
    setup.clock.advance(9.0)
    setup.annotate(3)
    assert await setup.replicas("b") == 0
    setup.clock.advance(1.5)
    setup.annotate(3)
    assert await setup.replicas("b") == 1  # preempts a (priority 500 > 10)
    assert await setup.replicas("a") == 0
    swap = setup.arbiter.swaps[-1]
    assert (swap.group, swap.swap.winner, swap.swap.losers, swap.swap.reason) == (
        GROUP,
        "default/b",
        ("default/a",),
        "priority",
    )
    assert setup.source.history.groups[GROUP].count == 1


async def test_shared_groups_keep_the_v1alpha2_threshold(store: ModelStore) -> None:
    setup = Setup(store)
    assert await setup.replicas("x") == 1
    setup.clock.advance(400.0)  # past the 5 min swap cooldown; x idle past the window
    setup.arbiter.demand.queued("default/y", 1, "proxy")
    assert await setup.replicas("y") == 1  # one request is enough, at once


async def test_annotated_demand_yields_to_the_bus(store: ModelStore) -> None:
    """A queue reported on the bus and on the GPUGroup is counted once."""
    clock = ManualClock()
    book = DemandBook(clock)
    book.asserted("default/b", 3)
    book.queued("default/b", 2, "proxy-1")
    found = book.queue("default/b", 120.0)
    assert found is not None
    assert found.depth == 2
    book.queued("default/b", 0, "proxy-1")
    found = book.queue("default/b", 120.0)
    assert found is not None
    assert found.depth == 3
    book.asserted("default/b", 0)
    assert book.queue("default/b", 120.0) is None


async def test_the_status_says_who_holds_the_gpu_and_why_the_others_wait(
    store: ModelStore,
) -> None:
    setup = Setup(store)
    setup.index.put(gpugroup())
    group = setup.index.get("default/pair")
    assert group is not None

    def wall(at: float) -> datetime:
        return T0 + timedelta(seconds=at)

    def status(phases: dict[str, ModelPhase]) -> dict[str, Any]:
        keys = ["default/a", "default/b"]
        queues = {k: setup.arbiter.demand.queue(k, 120.0) for k in keys}
        state = setup.arbiter.state(GROUP)
        history = setup.source.history.groups.get(GROUP)
        built = group_status(group, state, history, phases, queues, wall)
        return built.model_dump(mode="json", by_alias=True, exclude_none=True)

    assert status({})["phase"] == "Pending"  # never decided
    assert await setup.replicas("a") == 1
    assert status({})["phase"] == "Pending"  # a holds it, still starting
    first = status({"default/a": ModelPhase.READY})
    assert (first["phase"], first["activeModel"], first["swapCount"]) == ("Active", "a", 0)
    assert [m["state"] for m in first["modelStatuses"]] == ["Active", "Idle"]

    setup.clock.advance(60.0)
    setup.arbiter.demand.served("default/a")
    setup.annotate(3)
    assert await setup.replicas("b") == 0
    queued = status({"default/a": ModelPhase.READY})
    assert queued["modelStatuses"][1] == {
        "name": "b",
        "state": "Queued",
        "queuedRequests": 3,
        "queuedSince": "2026-12-03T12:01:00Z",
    }
    setup.clock.advance(10.5)
    setup.annotate(3)
    assert await setup.replicas("b") == 1
    swapped = status({"default/a": ModelPhase.READY, "default/b": ModelPhase.LOADING})
    assert (swapped["phase"], swapped["activeModel"], swapped["swapCount"]) == ("Swapping", "b", 1)
    assert swapped["lastSwapTime"] == "2026-12-03T12:01:10.500000Z"
    assert swapped["lastSwapReason"] == "priority: b preempted a"
    assert swapped["modelStatuses"][0] == {
        "name": "a",
        "state": "Preempted",
        "preemptedAt": "2026-12-03T12:01:10.500000Z",
        "preemptedBy": "b",
    }
    assert status({"default/b": ModelPhase.READY})["phase"] == "Active"
    assert group_name(group) == GROUP
