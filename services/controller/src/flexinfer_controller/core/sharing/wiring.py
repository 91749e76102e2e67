"""The SharedArbiter as the running controller builds it: the store's Models as each
group's members, the process's monotonic clock, and the work queue to reconcile with."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from flexinfer_common.api import Model
from flexinfer_common.store import ModelStore
from flexinfer_controller.core.sharing.arbiter import GroupMembers, SharedArbiter
from flexinfer_controller.core.sharing.clock import MonotonicClock
from flexinfer_controller.core.sharing.demand import DemandBook
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
    metrics: SwapMetrics | None = None,
) -> SharedArbiter:
    """An arbiter over ``store``'s groups on the monotonic clock, reconciling via ``requeue``
    (its swaps counted on ``metrics``)."""
    clock = MonotonicClock()
    return SharedArbiter(
        clock=clock,
        demand=DemandBook(clock),
        policy=policy,
        members=store_members(store),
        requeue=requeue,
        metrics=metrics,
    )
