"""A GPUGroup's status from what the arbiter holds: a pure function, times given.

* ``phase``: ``Pending`` before the arbiter decided the group (no member reconciled yet, or
  sharing is off), ``Idle`` when no member holds the GPU, ``Active`` when a holder's Model is
  Ready, ``Swapping`` while the holders' Models are not Ready yet after a swap (before the
  first swap that is ``Pending``: the first holder is starting);
* ``activeModel``: the holder (the Ready one first; co-resident holders in the order they
  got the GPU); ``lastSwapTime``, ``lastSwapReason`` (``<reason>: <winner> preempted
  <losers>``, reason ``priority``, ``idle`` or ``aging``) and ``swapCount`` from the swaps
  this controller made;
* ``modelStatuses[]``, in the order of ``spec.models``: ``Active`` (holds the GPU),
  ``Preempted`` (evicted while it still wanted it: ``preemptedAt``, ``preemptedBy``),
  ``Queued`` (wants it and waits), ``Idle``; with ``queuedRequests`` and ``queuedSince``
  while requests wait for it.

The arbiter keeps times on its monotonic clock; ``wall`` turns them into datetimes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime

from flexinfer_common.api.gpugroup import GPUGroup, GPUGroupStatus, GroupPhase, MemberStatus
from flexinfer_common.api.status import ModelPhase
from flexinfer_controller.core.sharing.decide import GroupState
from flexinfer_controller.core.sharing.demand import Queue
from flexinfer_controller.core.sharing.gpugroups import GroupHistory, member_key

Wall = Callable[[float], datetime]
"""A monotonic time of the arbiter's clock as a wall-clock time."""


def group_status(
    group: GPUGroup,
    state: GroupState | None,
    history: GroupHistory | None,
    phases: Mapping[str, ModelPhase | None],
    queues: Mapping[str, Queue | None],
    wall: Wall,
) -> GPUGroupStatus:
    """The status of ``group`` (``phases`` and ``queues`` by member Model key)."""
    history = history or GroupHistory()
    names = {member_key(group, m): m.name for m in group.spec.models}
    status = GPUGroupStatus(
        phase=GroupPhase.PENDING,
        swap_count=history.count,
        allocated_gpu=group.status.allocated_gpu,
        model_statuses=[
            _member(key, name, state, queues.get(key), names, wall) for key, name in names.items()
        ],
    )
    last = history.last
    if last is not None:
        losers = ", ".join(names.get(k, k) for k in last.losers)
        status.last_swap_time = wall(last.at)
        status.last_swap_reason = (
            f"{last.reason}: {names.get(last.winner, last.winner)} preempted {losers}"
        )
    if state is None:
        return status
    holders = [k for k in state.residents if k in names]
    ready = [k for k in holders if phases.get(k) is ModelPhase.READY]
    if holders:
        status.active_model = names[(ready or holders)[0]]
    status.phase = _phase(holders, ready, history)
    return status


def _phase(holders: list[str], ready: list[str], history: GroupHistory) -> GroupPhase:
    if not holders:
        return GroupPhase.IDLE
    if ready:
        return GroupPhase.ACTIVE
    return GroupPhase.SWAPPING if history.count else GroupPhase.PENDING


def _member(
    key: str,
    name: str,
    state: GroupState | None,
    queue: Queue | None,
    names: Mapping[str, str],
    wall: Wall,
) -> MemberStatus:
    status = MemberStatus(name=name, state="Idle")
    if queue is not None:
        status.queued_requests = queue.depth
        status.queued_since = wall(queue.since)
    if state is None:
        return status
    preempted = state.preempted.get(key)
    if key in state.residents:
        status.state = "Active"
    elif preempted is not None:
        status.state = "Preempted"
        status.preempted_at = wall(preempted[0])
        status.preempted_by = names.get(preempted[1], preempted[1])
    elif key in state.waiting:
        status.state = "Queued"
    return status
