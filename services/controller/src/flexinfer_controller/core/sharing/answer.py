"""What the arbiter answers one member of a group: its replicas, the verdict that says why
it runs fewer than it wants (which Model holds the GPU, and why this one waits), and its
``status.sharedGroup``.

``state`` is ``Active`` (it holds the GPU), ``Preempted`` (evicted while it still wanted
it), ``Queued`` (it waits for the GPU) or ``Idle`` (it wants nothing now);
``queuePosition`` counts from 1, the next member to get the GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from flexinfer_common.api.status import SharedGroupStatus
from flexinfer_controller.core.sharing.decide import GroupState, Member
from flexinfer_controller.core.sharing.hook import Hold, SharedVerdict, Sharing


@dataclass(frozen=True, slots=True)
class Asked:
    """The member asked about, in group ``group``, and what the answer depends on."""

    group: str
    key: str
    member: Member | None
    now: float
    recheck_s: float | None
    drain_s: float
    placed: bool
    """The reconcile placed it (else it waits for a GPU to free)."""
    preempted_at: datetime | None = None


def answer(state: GroupState, asked: Asked) -> Sharing:
    """The replicas and verdict of ``asked.key`` in ``state``."""
    name, key, recheck = asked.group, asked.key, asked.recheck_s
    holders = ", ".join(sorted(state.residents)) or "nobody"
    if key in state.residents:
        active = SharedGroupStatus(group_name=name, state="Active")
        # A holder looks again when a waiter's gate opens too: the waiter may not be
        # reconciled at all (unplaced while the GPU is full).
        losers = frozenset(state.loading.get(key) or ())
        return Sharing(1, _taking_over(state, asked), recheck, active, waits_for=losers)
    if key not in state.waiting:
        return Sharing(0, group=SharedGroupStatus(group_name=name, state="Idle"))
    line = sorted(state.waiting, key=lambda k: (state.waiting[k], k))
    position = line.index(key) + 1
    preempted = state.preempted.get(key)
    if preempted is not None:
        by = preempted[1]
        message = f"shared GPU group {name!r}: preempted by {by}; held by {holders}"
        verdict = SharedVerdict(Hold.PREEMPTED, "Preempted", message, asked.drain_s, name)
        status = SharedGroupStatus(
            group_name=name,
            state="Preempted",
            queue_position=position,
            preempted_by=by,
            preempted_at=asked.preempted_at,
        )
        return Sharing(0, verdict, recheck, status)
    message = f"shared GPU group {name!r} is held by {holders}; waiting for it"
    message += f" ({position - 1} ahead)"
    member = asked.member
    if member is not None and member.blocked(asked.now):
        message += "; its engine crashed while loading: it claims the GPU again"
        if member.blocked_until != float("inf") and member.blocked_until is not None:
            message += f" in {member.blocked_until - asked.now:.1f}s"
        else:
            message += " once its spec changes"
    verdict = SharedVerdict(Hold.QUEUED, "WaitingForGPU", message, 0.0, name)
    queued = SharedGroupStatus(group_name=name, state="Queued", queue_position=position)
    return Sharing(0, verdict, recheck, queued)


def _taking_over(state: GroupState, asked: Asked) -> SharedVerdict | None:
    """A winner that cannot be placed yet waits for the losers' engines to drain and stop:
    said so, rather than a bare lack of VRAM."""
    losers = state.loading.get(asked.key)
    if asked.placed or not losers:
        return None
    return waiting_for_swap(asked.group, sorted(losers), asked.drain_s)


def waiting_for_swap(group: str, losers: list[str], drain_s: float) -> SharedVerdict:
    """The verdict of a winner whose start waits for ``losers`` to drain and stop."""
    message = (
        f"shared GPU group {group!r} is handed to it: waiting for {', '.join(losers)} to "
        f"finish its running requests (up to {drain_s:g}s) and stop"
    )
    return SharedVerdict(Hold.QUEUED, "WaitingForSwap", message, 0.0, group)
