"""The SharedArbiter: the shared-GPU hook for ``spec.gpu.shared`` groups.

On every reconcile of a member (``handleSharedGPU``) it decides the whole group again
(``chooseSharedGroupLeader``, see ``decide``) and answers the reconciled Model's replicas:
1 while it holds the GPU, else 0 with a Preempted or Queued verdict. Members whose hold
changed are reconciled at once through ``requeue`` (the loser scales to 0, the winner to
1), and a member left waiting is looked at again when its next gate opens (``recheck_s``).

It learns the group's members from their reconciles, and from ``groups`` (each Model's
group, the group's members and its policy: ``groups.SharedGroups`` over the store's Models
of a ``gpu.shared`` group by default, v1alpha1 GPUGroups through ``gpugroups``) when it
lists them, so that a member that cannot be placed while the GPU is full still claims it.
A Model is pinned by the annotation ``flexinfer.ai/pinned: "true"`` (the API has no
``spec.gpu.pinned``): it is never evicted.

Queued requests for a member (``observe``) make its group's holders decide again at once,
and so does a deleted member (``forget``): a claimant that cannot be placed beside them is
never reconciled into a decision of its own.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from flexinfer_common.api import Model
from flexinfer_common.api.status import GPUStatus
from flexinfer_common.bus.topics import ActivityEvent, DemandEvent
from flexinfer_controller.core.sharing.clock import Clock
from flexinfer_controller.core.sharing.decide import GroupState, Member, Outcome, Swap, decide
from flexinfer_controller.core.sharing.demand import DemandBook
from flexinfer_controller.core.sharing.groups import GroupMembers, GroupSource, SharedGroups
from flexinfer_controller.core.sharing.hook import Hold, SharedVerdict, Sharing
from flexinfer_controller.core.sharing.policy import SwapPolicy, shared_policy

PINNED_ANNOTATION = "flexinfer.ai/pinned"
"""``"true"`` on a Model: never evicted from its shared GPU."""


@dataclass(frozen=True, slots=True)
class GroupSwap:
    """A swap in shared group ``group``."""

    group: str
    swap: Swap


@dataclass(slots=True)
class _Group:
    state: GroupState
    seen: dict[str, tuple[Model, int]]
    """Members the arbiter was asked about: the Model and the replicas it wanted."""
    budget_mb: int | None = None


class SharedArbiter:
    """Arbitrates each ``gpu.shared`` group's GPU by demand, priority and VRAM."""

    def __init__(
        self,
        *,
        clock: Clock,
        demand: DemandBook,
        policy: SwapPolicy | None = None,
        members: GroupMembers | None = None,
        requeue: Callable[[str], object] | None = None,
        history: int = 256,
        groups: GroupSource | None = None,
    ) -> None:
        """``groups`` (default: ``SharedGroups(policy, members)``) says each Model's group,
        its members and its policy; ``policy`` is the v1alpha2 one."""
        self._clock = clock
        self.demand = demand
        self.policy = policy or shared_policy()
        self._sources = groups or SharedGroups(self.policy, members)
        self._requeue = requeue
        self._groups: dict[str, _Group] = {}
        self._group_of: dict[str, str] = {}
        """The group each member was last decided in."""
        self.swaps: deque[GroupSwap] = deque(maxlen=history)
        """The latest swaps, oldest first."""

    async def arbitrate(self, model: Model, placement: GPUStatus, desired: int) -> Sharing:
        """The replicas ``model`` runs now: 1 while it holds its group's GPU, else 0."""
        membership = await self._sources.group_of(model)
        name = membership.group if membership is not None else None
        model = membership.model if membership is not None else model
        self._leave_others(model.key, name)
        if not name:
            self._group_of.pop(model.key, None)
            return Sharing(desired)
        self._group_of[model.key] = name
        group = self._groups.setdefault(name, _Group(GroupState(), {}))
        group.seen[model.key] = (model, desired)
        if placement.memory_mb is not None:
            group.budget_mb = placement.memory_mb
        outcome = await self._decide(name, group)
        for key in outcome.changed:
            if key != model.key and self._requeue is not None:
                self._requeue(key)
        return self._answer(name, group, model.key, outcome)

    def holders(self, group: str) -> list[str]:
        """The members holding ``group``'s GPU now, in the order they got it."""
        found = self._groups.get(group)
        return list(found.state.residents) if found else []

    def observe(self, event: DemandEvent | ActivityEvent, key: str) -> None:
        """Record demand for Model ``key``; when requests wait for it, the holders of its
        group (of every group, while its group is not known yet) decide again."""
        self.demand.observe(event, key)
        if not isinstance(event, DemandEvent) or event.queue_depth <= 0:
            return
        name = self._group_of.get(key)
        names = [name] if name is not None else list(self._groups)
        for found in (self._groups.get(n) for n in names):
            if found is not None:
                self._poke(found.state.residents, key)

    def forget(self, key: str) -> None:
        """Model ``key`` was deleted: it leaves its group, whose others decide again."""
        name = self._group_of.pop(key, None)
        group = self._groups.get(name) if name is not None else None
        if group is not None:
            state = group.state
            self._poke({*state.residents, *state.waiting, *group.seen}, key)
        self._leave_others(key, None)
        self.demand.forget(key)

    def _poke(self, keys: Iterable[str], skip: str) -> None:
        """Reconcile ``keys`` (but ``skip``) now."""
        if self._requeue is None:
            return
        for key in sorted(keys):
            if key != skip:
                self._requeue(key)

    def _leave_others(self, key: str, name: str | None) -> None:
        for other, group in self._groups.items():
            if other != name:
                group.seen.pop(key, None)

    async def _decide(self, name: str, group: _Group) -> Outcome:
        now = self._clock.now()
        models = {key: model for key, (model, _) in group.seen.items()}
        found = await self._sources.members(name)
        if found is not None:
            listed = {m.key: m for m in found}
            for key in [k for k in group.seen if k not in listed]:
                del group.seen[key]  # deleted, or moved to another group
            models = {**listed, **models}
            models = {k: v for k, v in models.items() if k in listed}
        self._group_of.update(dict.fromkeys(models, name))
        policy = self._sources.policy(name) or self.policy
        facts = {key: self._member(key, m, group, policy) for key, m in models.items()}
        outcome = decide(facts, group.state, policy, group.budget_mb, now)
        self.swaps.extend(GroupSwap(name, swap) for swap in outcome.swaps)
        self._sources.decided(name, outcome)
        return outcome

    def state(self, group: str) -> GroupState | None:
        """What ``group`` holds now (None: never decided); read it, do not change it."""
        found = self._groups.get(group)
        return found.state if found is not None else None

    def _member(self, key: str, model: Model, group: _Group, policy: SwapPolicy) -> Member:
        gpu = model.spec.gpu_or_default
        seen = group.seen.get(key)
        cooldown = gpu.swap_cooldown.total_seconds() if gpu.swap_cooldown is not None else None
        return Member(
            key=key,
            priority=gpu.priority,
            vram_mb=gpu.vram_estimate_mb,
            pinned=model.metadata.annotations.get(PINNED_ANNOTATION, "").lower() == "true",
            wants=seen is not None and seen[1] > 0,
            queue=self.demand.queue(key, policy.demand_window_s),
            last_demand=self.demand.last_demand(key),
            cooldown_s=cooldown,
        )

    def _answer(self, name: str, group: _Group, key: str, outcome: Outcome) -> Sharing:
        state = group.state
        if key in state.residents:
            # A holder looks again when a waiter's gate opens too: the waiter may not be
            # reconciled at all (unplaced while the GPU is full).
            return Sharing(1, recheck_s=outcome.recheck_s)
        if key not in state.waiting:
            return Sharing(0)
        holders = ", ".join(sorted(state.residents)) or "nobody"
        recheck = outcome.recheck_s
        preempted = state.preempted.get(key)
        if preempted is not None:
            message = f"shared GPU group {name!r}: preempted by {preempted[1]}; held by {holders}"
            return Sharing(0, SharedVerdict(Hold.PREEMPTED, "Preempted", message), recheck)
        ahead = sorted(state.waiting, key=lambda k: (state.waiting[k], k)).index(key)
        message = f"shared GPU group {name!r} is held by {holders}; waiting for it ({ahead} ahead)"
        return Sharing(0, SharedVerdict(Hold.QUEUED, "WaitingForGPU", message), recheck)
