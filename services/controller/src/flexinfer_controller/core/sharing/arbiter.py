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

Engine events (``engine_event``) end a swap: the winner's Ready settles it; a crash puts
the member in crash backoff (``Member.blocked_until``), and a winner that crashed while
loading hands the GPU back to the members it evicted (``decide``'s fallback). Swaps and
their steps are counted on ``metrics`` when given, and each swap is an Event on the winner
and on each loser (``events``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime

from flexinfer_common.api import Model
from flexinfer_common.api.meta import utcnow
from flexinfer_common.api.operations import UNLOADED_AT_ANNOTATION, is_pinned
from flexinfer_common.api.status import GPUStatus
from flexinfer_common.bus.topics import ActivityEvent, DemandEvent
from flexinfer_controller.core.events import LogEvents, ModelEvents
from flexinfer_controller.core.sharing.answer import Asked, answer
from flexinfer_controller.core.sharing.clock import Clock
from flexinfer_controller.core.sharing.decide import GroupState, Member, Outcome, Swap, decide
from flexinfer_controller.core.sharing.demand import DemandBook
from flexinfer_controller.core.sharing.groups import GroupMembers, GroupSource, SharedGroups
from flexinfer_controller.core.sharing.hook import EngineChange, EngineKind, Sharing
from flexinfer_controller.core.sharing.metrics import SwapMetrics
from flexinfer_controller.core.sharing.policy import SwapPolicy, shared_policy


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
    facts: dict[str, Member] = field(default_factory=dict)
    """What the latest decision knew of each member."""
    restored: bool = False
    """Its holders were read back from the members' stored status (once, at its first
    decision in this process)."""
    assumed: set[str] = field(default_factory=set)
    """Restored holders not reconciled yet: taken to want their replica until they are."""


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
        metrics: SwapMetrics | None = None,
        wall: Callable[[], datetime] = utcnow,
        events: ModelEvents | None = None,
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
        self._metrics = metrics
        self._events: ModelEvents = events or LogEvents()
        self._wall = wall
        self._preempted_at: dict[str, datetime] = {}
        """When each preempted member was evicted, on the wall clock (status.sharedGroup)."""
        self._failed: dict[str, tuple[int, float]] = {}
        self._unloads: dict[str, str] = {}
        """The last unload stamp seen per member (its demand was dropped then)."""
        """Members whose engine crashed: the generation, and the end of its backoff."""

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
        group.assumed.discard(model.key)
        if placement.memory_mb is not None:
            group.budget_mb = placement.memory_mb
        outcome = await self._decide(name, group)
        for key in outcome.changed:
            if key != model.key and self._requeue is not None:
                self._requeue(key)
        placed = placement != GPUStatus()
        return self._answer(name, group, model.key, outcome, placed)

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
        self._unloads.pop(key, None)
        self._failed.pop(key, None)
        self._preempted_at.pop(key, None)
        if self._metrics is not None:
            self._metrics.forget(key)

    def engine_event(self, change: EngineChange) -> None:
        """A member's engine became ready (its swap stands), stopped, or crashed (it waits
        its backoff; its group decides again, so a swap it won falls back)."""
        key = change.key
        name = self._group_of.get(key)
        group = self._groups.get(name) if name is not None else None
        if change.kind is EngineKind.STOPPED:
            if self._metrics is not None:
                self._metrics.stopped(change.replica)
            self._hand_over(group, key)
            return
        if change.kind is EngineKind.SLEPT:
            if self._metrics is not None:
                self._metrics.slept(change.replica, change.took_s)
            self._hand_over(group, key)
            return
        if change.kind is EngineKind.READY:
            self._failed.pop(key, None)
            if group is not None:
                group.state.loading.pop(key, None)
            if self._metrics is not None:
                self._metrics.ready(key, change.took_s, woken=change.woken)
            return
        self._failed[key] = (change.generation, self._clock.now() + change.backoff_s)
        if group is not None:
            state = group.state
            self._poke({*state.residents, *state.waiting, *group.seen}, key)

    def _hand_over(self, group: _Group | None, loser: str) -> None:
        """An engine of ``loser`` freed the GPU: the winners waiting for it start now."""
        if group is not None:
            winners = [w for w, losers in group.state.loading.items() if loser in losers]
            self._poke(winners, loser)

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
        if not group.restored:
            group.restored = True
            group.assumed = restore(group.state, name, models.values(), now)
        policy = self._policy(name)
        facts = {key: self._member(key, m, group, policy) for key, m in models.items()}
        group.facts = facts
        outcome = decide(facts, group.state, policy, group.budget_mb, now)
        self.swaps.extend(GroupSwap(name, swap) for swap in outcome.swaps)
        self._sources.decided(name, outcome)
        self._record(name, outcome)
        return outcome

    def _policy(self, group: str) -> SwapPolicy:
        """``group``'s policy: its source's (a GPUGroup's own), else the v1alpha2 one."""
        return self._sources.policy(group) or self.policy

    def state(self, group: str) -> GroupState | None:
        """What ``group`` holds now (None: never decided); read it, do not change it."""
        found = self._groups.get(group)
        return found.state if found is not None else None

    def _record(self, name: str, outcome: Outcome) -> None:
        """The swaps' metrics, and when their losers were preempted (wall clock)."""
        for key in outcome.evicted:
            self._preempted_at[key] = self._wall()
        for key in outcome.granted:
            self._preempted_at.pop(key, None)
        for swap in outcome.swaps:
            self._tell(name, swap)
        if self._metrics is None:
            return
        for key in outcome.evicted + outcome.released:
            self._metrics.forget(key)  # it lost the GPU before its engine was Ready
        for swap in outcome.swaps:
            self._metrics.swapped(name, swap)

    def _tell(self, name: str, swap: Swap) -> None:
        """The swap as Events on its winner and on each of its losers."""
        losers = ", ".join(swap.losers)
        self._events.record(
            swap.winner, "GPUSwap",
            f"took shared GPU group {name!r} from {losers} ({swap.reason})",
        )  # fmt: skip
        for loser in swap.losers:
            self._events.record(
                loser, "Preempted",
                f"preempted by {swap.winner} in shared GPU group {name!r} ({swap.reason})",
            )  # fmt: skip

    def _member(self, key: str, model: Model, group: _Group, policy: SwapPolicy) -> Member:
        gpu = model.spec.gpu_or_default
        seen = group.seen.get(key)
        cooldown = gpu.swap_cooldown.total_seconds() if gpu.swap_cooldown is not None else None
        self._note_unload(key, model)
        return Member(
            key=key,
            priority=gpu.priority,
            vram_mb=gpu.vram_estimate_mb,
            pinned=is_pinned(model.metadata),
            wants=seen[1] > 0 if seen is not None else key in group.assumed,
            queue=self.demand.queue(key, policy.demand_window_s),
            last_demand=self.demand.last_demand(key),
            cooldown_s=cooldown,
            blocked_until=self._blocked_until(key, model),
        )

    def _note_unload(self, key: str, model: Model) -> None:
        """A new unload by hand (``flexinfer.ai/unloaded-at``) drops the demand heard for
        ``key`` until then: a proxy's queue report outlives the request it was about by up
        to the demand window, and would keep the unloaded Model on the GPU."""
        stamp = model.metadata.annotations.get(UNLOADED_AT_ANNOTATION)
        if stamp and self._unloads.get(key) != stamp:
            self._unloads[key] = stamp
            self.demand.clear(key)

    def _blocked_until(self, key: str, model: Model) -> float | None:
        """The end of ``key``'s crash backoff (a new spec starts afresh)."""
        failed = self._failed.get(key)
        if failed is None:
            return None
        if failed[0] != (model.metadata.generation or 1):
            del self._failed[key]
            return None
        return failed[1]

    def _answer(
        self, name: str, group: _Group, key: str, outcome: Outcome, placed: bool
    ) -> Sharing:
        asked = Asked(
            group=name,
            key=key,
            member=group.facts.get(key),
            now=self._clock.now(),
            recheck_s=outcome.recheck_s,
            drain_s=self._policy(name).drain_timeout_s,
            placed=placed,
            preempted_at=self._preempted_at.get(key),
        )
        return answer(group.state, asked)


def restore(state: GroupState, group: str, models: Iterable[Model], now: float) -> set[str]:
    """What a previous controller decided for ``group``, from its members' stored
    ``status.sharedGroup``: Active members hold the GPU (their cooldown starts again now,
    so a restart swaps nothing by itself), Preempted ones wait from now. Without this, the
    first member reconciled after a restart would take a GPU another member's engine holds.
    The holders restored are returned.
    """
    holders: set[str] = set()
    for model in models:
        shared = model.status.shared_group
        if shared is None or shared.group_name != group:
            continue
        if shared.state == "Active":
            state.residents.setdefault(model.key, now)
            holders.add(model.key)
        elif shared.state == "Preempted" and shared.preempted_by:
            state.preempted.setdefault(model.key, (now, shared.preempted_by))
            state.waiting.setdefault(model.key, now)
    return holders
