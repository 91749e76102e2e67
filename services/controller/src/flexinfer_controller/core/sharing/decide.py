"""The pure decision: which Models of one shared group hold its GPU now.

One call of ``decide`` looks at every member (its priority, VRAM estimate, pinning, the
replicas it wants and the demand waiting for it) and the group's state, and moves the
state on: members that want nothing leave the GPU; each claimant, best first, gets the GPU
when it fits next to those on it (co-residency by ``vramEstimateMB`` within the GPU's
memory; a member or GPU of unknown size needs the GPU alone); else, if its demand may
preempt, the evictable holders are evicted least recently used first until it fits.

A holder is evictable by a claimant when it is not pinned, its swap cooldown since it got
the GPU has passed, and the claimant passes the gate: a strictly higher priority, or the
holder is idle (no demand within the demand window), or the claimant is starving (its
demand waited ``starvation_s``: aging). Equal priorities therefore never preempt a busy
holder (no swap loop); the seed's ``demandedPriority >= readyPriority`` lets an equal one
through only once the holder is idle. Nothing reads a clock: ``now`` is given.

A swap that fails falls back: a member blocked by its crash backoff (``blocked_until``)
claims nothing until the backoff ends, and while it holds the GPU it got by a swap and has
not served yet (``GroupState.loading``: it crashed while loading), or while it is
crash-looping (blocked for ever), it releases the GPU. The members that swap evicted get it
back when they still want it, with the grant times they had: no fresh cooldown protects
them, and none traps the failed winner (``fallback`` swaps).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from flexinfer_controller.core.sharing.demand import Queue
from flexinfer_controller.core.sharing.policy import SwapPolicy

RECHECK_SLACK_S = 0.05
"""Look again just after a gate opens, so the comparison sees it open."""


@dataclass(frozen=True, slots=True)
class Member:
    """What the decision knows of one member of the group."""

    key: str
    priority: int
    vram_mb: int | None = None
    """Its ``gpu.vramEstimateMB`` (None: unknown, so it needs the GPU alone)."""
    pinned: bool = False
    wants: bool = False
    """The serverless rule gives it replicas (it was active within its idle timeout)."""
    queue: Queue | None = None
    """Requests waiting for it now (None: none reported within the demand window)."""
    last_demand: float | None = None
    cooldown_s: float | None = None
    """Its own swap cooldown (``gpu.swapCooldown``; None: the policy's)."""
    blocked_until: float | None = None
    """Its engine crashed: it claims nothing before this time (inf: crash-looping)."""

    def blocked(self, now: float) -> bool:
        """Whether its crash backoff keeps it off the GPU at ``now``."""
        return self.blocked_until is not None and now < self.blocked_until


@dataclass(slots=True)
class GroupState:
    """What a group remembers between decisions."""

    residents: dict[str, float] = field(default_factory=dict)
    """Members on the GPU, and when each got it."""
    preempted: dict[str, tuple[float, str]] = field(default_factory=dict)
    """Members evicted while they wanted the GPU: when, and by whom."""
    waiting: dict[str, float] = field(default_factory=dict)
    """Members that want the GPU and do not hold it, since when."""
    loading: dict[str, dict[str, float]] = field(default_factory=dict)
    """Winners of a swap that have not served yet: the losers and when each had got the
    GPU (they get it back, with those times, if the winner crashes while loading)."""


@dataclass(frozen=True, slots=True)
class Swap:
    """``winner`` took the GPU from ``losers`` at ``at``, for ``reason``."""

    at: float
    winner: str
    losers: tuple[str, ...]
    reason: str
    """``priority`` (higher), ``idle`` (the losers had no demand), ``aging``, or
    ``fallback`` (the losers had crashed while loading: the winner gets the GPU back)."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one decision changed, and when to decide again."""

    granted: tuple[str, ...] = ()
    evicted: tuple[str, ...] = ()
    released: tuple[str, ...] = ()
    swaps: tuple[Swap, ...] = ()
    recheck_s: float | None = None
    """Seconds until a gate opens for a waiting member (None: nothing waits on time)."""

    @property
    def changed(self) -> tuple[str, ...]:
        """Every member whose hold on the GPU changed."""
        return self.granted + self.evicted + self.released


@dataclass(frozen=True, slots=True)
class _Ctx:
    members: Mapping[str, Member]
    state: GroupState
    policy: SwapPolicy
    budget_mb: int | None
    now: float


def decide(
    members: Mapping[str, Member],
    state: GroupState,
    policy: SwapPolicy,
    budget_mb: int | None,
    now: float,
) -> Outcome:
    """Move ``state`` on to ``now`` and say what changed (``budget_mb``: the GPU's MiB)."""
    ctx = _Ctx(members, state, policy, budget_mb, now)
    released = _release(ctx)
    fallbacks = _fall_back(ctx, released)
    claimants = [m for m in _claimants(ctx) if not m.blocked(now)]
    granted: list[str] = [s.winner for s in fallbacks]
    evicted: list[str] = []
    swaps: list[Swap] = list(fallbacks)
    for claimant in claimants:
        losers = _admit(ctx, claimant)
        if losers is None:
            continue
        granted.append(claimant.key)
        evicted.extend(losers)
        if losers:
            swaps.append(Swap(now, claimant.key, losers, _reason(ctx, claimant, losers)))
    for key in [k for k in state.loading if k not in state.residents]:
        del state.loading[key]
    return Outcome(tuple(granted), tuple(evicted), released, tuple(swaps), _recheck(ctx))


def _release(ctx: _Ctx) -> tuple[str, ...]:
    """Holders that are gone, want no replica and have no demand, or failed (crashed while
    loading after a swap, or crash-looping) leave the GPU."""
    gone = [key for key in ctx.state.residents if _leaves(ctx, key)]
    for key in gone:
        del ctx.state.residents[key]
    for key in [k for k in ctx.state.preempted if k not in ctx.members]:
        del ctx.state.preempted[key]
    return tuple(gone)


def _leaves(ctx: _Ctx, key: str) -> bool:
    m = ctx.members.get(key)
    if m is None or not (m.wants or m.queue):
        return True
    crashed = m.blocked(ctx.now)
    return crashed and (key in ctx.state.loading or m.blocked_until == float("inf"))


def _fall_back(ctx: _Ctx, released: tuple[str, ...]) -> list[Swap]:
    """The losers of a swap whose winner failed while loading get the GPU back, each with
    the grant time it had, when they still want it and fit."""
    state = ctx.state
    swaps: list[Swap] = []
    for failed in released:
        losers = state.loading.pop(failed, {})
        for key, since in sorted(losers.items(), key=lambda kv: kv[1]):
            m = ctx.members.get(key)
            if m is None or key in state.residents or not (m.wants or m.queue):
                continue
            if m.blocked(ctx.now) or not fits(ctx, {*state.residents, key}):
                continue
            state.residents[key] = since
            state.waiting.pop(key, None)
            state.preempted.pop(key, None)
            swaps.append(Swap(ctx.now, key, (failed,), "fallback"))
    return swaps


def _claimants(ctx: _Ctx) -> list[Member]:
    """Members that want the GPU and do not hold it, best first; ``waiting`` kept current."""
    state = ctx.state
    claiming = [
        m
        for m in ctx.members.values()
        if m.key not in state.residents and (m.wants or m.queue is not None)
    ]
    keys = {m.key for m in claiming}
    for key in [k for k in state.waiting if k not in keys]:
        del state.waiting[key]
    for member in claiming:
        state.waiting.setdefault(member.key, ctx.now)
    return sorted(claiming, key=lambda m: _rank(ctx, m))


def _rank(ctx: _Ctx, m: Member) -> tuple[int, float, int, int, float, str]:
    """Starving first (longest wait first), then priority, demand, wait and name."""
    since = waiting_since(ctx.state, m)
    starving = is_starving(ctx, m)
    return (
        0 if starving else 1,
        since if starving else 0.0,
        -m.priority,
        0 if is_demanded(ctx.policy, m, ctx.now) else 1,
        since,
        m.key,
    )


def waiting_since(state: GroupState, m: Member) -> float:
    """When ``m`` began to wait for the GPU: its queue's start or its first claim."""
    since = state.waiting.get(m.key, float("inf"))
    if m.queue is not None:
        since = min(since, m.queue.since)
    return since


def is_demanded(policy: SwapPolicy, m: Member, now: float) -> bool:
    """Enough requests wait for ``m``, and for long enough, to preempt someone."""
    queue = m.queue
    return (
        queue is not None
        and queue.depth >= policy.queue_threshold
        and now - queue.since >= policy.hysteresis_s
    )


def is_starving(ctx: _Ctx, m: Member) -> bool:
    """Aging: ``m``'s demand has waited ``starvation_s`` or more."""
    if ctx.policy.starvation_s <= 0 or not is_demanded(ctx.policy, m, ctx.now):
        return False
    return ctx.now - waiting_since(ctx.state, m) >= ctx.policy.starvation_s


def is_idle(policy: SwapPolicy, m: Member, now: float) -> bool:
    """No request waits for ``m`` and none came within the demand window."""
    if m.queue is not None:
        return False
    return m.last_demand is None or now - m.last_demand > policy.demand_window_s


def protected_until(ctx: _Ctx, key: str) -> float:
    """When the swap cooldown of holder ``key`` ends."""
    own = ctx.members[key].cooldown_s
    cooldown = ctx.policy.swap_cooldown_s if own is None else own
    return ctx.state.residents[key] + cooldown


def fits(ctx: _Ctx, keys: set[str]) -> bool:
    """Whether these members fit on the GPU together by their VRAM estimates."""
    if len(keys) <= 1:
        return True
    sizes = [ctx.members[k].vram_mb for k in keys]
    if ctx.budget_mb is None or any(s is None for s in sizes):
        return False
    return sum(s for s in sizes if s is not None) <= ctx.budget_mb


def _admit(ctx: _Ctx, c: Member) -> tuple[str, ...] | None:
    """Put ``c`` on the GPU: the members it evicted, or None when it must wait."""
    state = ctx.state
    holders = set(state.residents)
    if fits(ctx, holders | {c.key}):
        _grant(ctx, c.key)
        return ()
    if not _may_preempt(ctx, c):
        return None
    victims: list[str] = []
    for key in sorted(holders, key=lambda k: _lru(ctx, k)):
        if not _evictable(ctx, c, ctx.members[key]):
            continue
        victims.append(key)
        if fits(ctx, holders - set(victims) | {c.key}):
            state.loading[c.key] = {loser: state.residents[loser] for loser in victims}
            for loser in victims:
                del state.residents[loser]
                state.preempted[loser] = (ctx.now, c.key)
                state.waiting[loser] = ctx.now  # it still wants the GPU: it waits from now
            _grant(ctx, c.key)
            return tuple(victims)
    return None


def _grant(ctx: _Ctx, key: str) -> None:
    ctx.state.residents[key] = ctx.now
    ctx.state.waiting.pop(key, None)
    ctx.state.preempted.pop(key, None)


def _lru(ctx: _Ctx, key: str) -> tuple[float, float, str]:
    """Least recently used first: last demand, then when it got the GPU."""
    last = ctx.members[key].last_demand
    return (float("-inf") if last is None else last, ctx.state.residents[key], key)


def _may_preempt(ctx: _Ctx, c: Member) -> bool:
    """``c``'s demand is enough to preempt, and it is not in a preemption cooldown."""
    if not is_demanded(ctx.policy, c, ctx.now):
        return False
    preempted = ctx.state.preempted.get(c.key)
    return preempted is None or ctx.now - preempted[0] >= ctx.policy.preemption_cooldown_s


def _evictable(ctx: _Ctx, c: Member, holder: Member) -> bool:
    """Whether ``c`` may take the GPU from ``holder`` now."""
    if holder.pinned or ctx.now < protected_until(ctx, holder.key):
        return False
    return (
        c.priority > holder.priority or is_idle(ctx.policy, holder, ctx.now) or is_starving(ctx, c)
    )


def _reason(ctx: _Ctx, c: Member, losers: tuple[str, ...]) -> str:
    if all(is_idle(ctx.policy, ctx.members[k], ctx.now) for k in losers):
        return "idle"
    if all(c.priority > ctx.members[k].priority for k in losers):
        return "priority"
    return "aging"


def _recheck(ctx: _Ctx) -> float | None:
    """Seconds until the first time-gate opens for a member still waiting."""
    if not ctx.state.waiting:
        return None
    times: list[float] = []
    for key in ctx.state.residents:
        times.append(protected_until(ctx, key))
        last = ctx.members[key].last_demand
        if last is not None:
            times.append(last + ctx.policy.demand_window_s)
    for key in ctx.state.waiting:
        m = ctx.members[key]
        if m.blocked_until is not None and m.blocked_until != float("inf"):
            times.append(m.blocked_until)
        times.append(waiting_since(ctx.state, m) + ctx.policy.starvation_s)
        if m.queue is not None:
            times.append(m.queue.since + ctx.policy.hysteresis_s)
        if key in ctx.state.preempted:
            times.append(ctx.state.preempted[key][0] + ctx.policy.preemption_cooldown_s)
    ahead = [t - ctx.now for t in times if t > ctx.now]
    return min(ahead) + RECHECK_SLACK_S if ahead else None
