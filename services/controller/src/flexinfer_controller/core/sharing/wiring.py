"""The SharedArbiter as the running controller builds it: v1alpha1 GPUGroups and the
store's ``gpu.shared`` Models as its groups, the process's monotonic clock, and the work
queue to reconcile with."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from flexinfer_common.api import Model
from flexinfer_common.store import ModelStore
from flexinfer_controller.core.events import ModelEvents
from flexinfer_controller.core.sharing.arbiter import SharedArbiter
from flexinfer_controller.core.sharing.clock import MonotonicClock
from flexinfer_controller.core.sharing.demand import DemandBook
from flexinfer_controller.core.sharing.gpugroups import GPUGroupSource, GPUGroupWiring
from flexinfer_controller.core.sharing.groups import ChainedGroups, GroupMembers, SharedGroups
from flexinfer_controller.core.sharing.metrics import SwapMetrics
from flexinfer_controller.core.sharing.policy import SwapPolicy


def store_members(store: ModelStore) -> GroupMembers:
    """The live Models of a group: those in ``store`` whose ``gpu.shared`` names it."""

    async def members(group: str) -> Sequence[Model]:
        # Deleting Models leave at once: their finalizer keeps them stored a while.
        return [
            model
            for model in await store.list_models()
            if model.spec.gpu_or_default.shared == group
            and model.metadata.deletion_timestamp is None
        ]

    return members


def running_arbiter(
    store: ModelStore,
    policy: SwapPolicy,
    requeue: Callable[[str], object],
    gpugroups: GPUGroupWiring | None = None,
    metrics: SwapMetrics | None = None,
    events: ModelEvents | None = None,
) -> SharedArbiter:
    """An arbiter over ``store``'s groups on the monotonic clock, reconciling via ``requeue``:
    the GPUGroups of ``gpugroups.index`` with their own policies, then ``gpu.shared`` groups
    with ``policy``; its swaps are counted on ``metrics`` and recorded on ``events``."""
    clock = MonotonicClock()
    demand = DemandBook(clock)
    wiring = gpugroups or GPUGroupWiring()
    source = GPUGroupSource(wiring.index, store, demand, history=wiring.history)
    groups = ChainedGroups([source, SharedGroups(policy, store_members(store))], policy)
    arbiter = SharedArbiter(
        clock=clock,
        demand=demand,
        policy=policy,
        requeue=requeue,
        groups=groups,
        metrics=metrics,
        events=events,
    )
    wiring.source, wiring.arbiter, wiring.clock = source, arbiter, clock
    return arbiter
