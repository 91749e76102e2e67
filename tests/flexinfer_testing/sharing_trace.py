"""Scripted demand traces on a simulated clock, driving the shared-GPU arbiter.

A ``Trace`` plays the controller and the proxy around a ``SharedArbiter``: every step it
reconciles each Model (its desired replicas from its last activity, as the serverless rule
does), and a Model that holds the GPU serves what waits for it once loaded. It records every
request's wait, and what held the GPU at each step, so tests assert swaps and waits exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from flexinfer_common.api import Model
from flexinfer_common.api.operations import PINNED_ANNOTATION
from flexinfer_common.api.status import GPUStatus
from flexinfer_controller.core.sharing.arbiter import GroupSwap, SharedArbiter
from flexinfer_controller.core.sharing.clock import ManualClock
from flexinfer_controller.core.sharing.demand import DemandBook
from flexinfer_controller.core.sharing.policy import SwapPolicy

GROUP = "g1"


@dataclass(frozen=True, slots=True)
class TraceModel:
    """One member of the trace's shared group."""

    name: str
    priority: int = 100
    vram_mb: int | None = None
    pinned: bool = False
    swap_cooldown: str | None = None
    idle_timeout_s: float = 300.0

    def model(self) -> Model:
        """The Model object the arbiter sees."""
        gpu: dict[str, object] = {"vendor": "nvidia", "shared": GROUP, "priority": self.priority}
        if self.vram_mb is not None:
            gpu["vramEstimateMB"] = self.vram_mb
        if self.swap_cooldown is not None:
            gpu["swapCooldown"] = self.swap_cooldown
        annotations = {PINNED_ANNOTATION: "true"} if self.pinned else {}
        return Model.model_validate(
            {
                "apiVersion": "ai.flexinfer/v1alpha2",
                "kind": "Model",
                "metadata": {"name": self.name, "namespace": "default", "annotations": annotations},
                "spec": {"backend": "reference", "source": "file:///m", "gpu": gpu},
            }
        )


Demand = Callable[[float], Iterable[str]]
"""The names of the Models that get one request at simulated time ``t``."""


@dataclass(slots=True)
class Trace:
    """The arbiter, a simulated clock and the requests of a scripted trace."""

    members: Sequence[TraceModel]
    policy: SwapPolicy
    budget_mb: int | None = None
    step_s: float = 5.0
    load_s: float = 0.0
    """How long a Model that got the GPU loads before it serves."""
    clock: ManualClock = field(default_factory=ManualClock)
    waits: dict[str, list[float]] = field(default_factory=dict)
    timeline: list[tuple[float, tuple[str, ...]]] = field(default_factory=list)
    """(time, the Models running a replica) after each step."""
    pending: dict[str, list[float]] = field(default_factory=dict)
    last_active: dict[str, float] = field(default_factory=dict)
    running_since: dict[str, float] = field(default_factory=dict)
    arbiter: SharedArbiter = field(init=False)
    models: dict[str, Model] = field(init=False)

    def __post_init__(self) -> None:
        self.arbiter = SharedArbiter(
            clock=self.clock, demand=DemandBook(self.clock), policy=self.policy
        )
        self.models = {m.name: m.model() for m in self.members}

    @property
    def swaps(self) -> list[GroupSwap]:
        """Every swap so far."""
        return list(self.arbiter.swaps)

    def request(self, name: str) -> None:
        """One request for ``name`` queues at the proxy now."""
        now = self.clock.now()
        self.pending.setdefault(name, []).append(now)
        self.last_active[name] = now  # the controller notes the demand's activity
        depth = len(self.pending[name])
        self.arbiter.demand.queued(f"default/{name}", depth, "proxy-0")

    async def run(self, until: float, demand: Demand) -> None:
        """Step the clock to ``until``: requests, then a reconcile of every Model."""
        while self.clock.now() < until:
            for name in demand(self.clock.now()):
                self.request(name)
            self._resend()
            await self.reconcile_all()
            self.clock.advance(self.step_s)

    def _resend(self) -> None:
        """The proxy repeats the depth of every queue still waiting (its resend interval)."""
        for name, queued in self.pending.items():
            if queued:
                self.arbiter.demand.queued(f"default/{name}", len(queued), "proxy-0")

    async def reconcile_all(self) -> None:
        """Reconcile every Model once, in name order, and serve what the runners can."""
        now = self.clock.now()
        for member in self.members:
            model = self.models[member.name]
            active = self.last_active.get(member.name)
            desired = int(active is not None and now - active < member.idle_timeout_s)
            placement = GPUStatus(node="n1", device="0", vendor="nvidia", memory_mb=self.budget_mb)
            sharing = await self.arbiter.arbitrate(model, placement, desired)
            self._run(member.name, sharing.replicas > 0, now)
        running = tuple(n for n in self.running_since)
        self.timeline.append((now, running))

    def _run(self, name: str, runs: bool, now: float) -> None:
        if not runs:
            self.running_since.pop(name, None)
            return
        since = self.running_since.setdefault(name, now)
        queued = self.pending.get(name)
        if queued and now - since >= self.load_s:
            self.waits.setdefault(name, []).extend(now - t for t in queued)
            queued.clear()
            self.last_active[name] = now
            self.arbiter.demand.served(f"default/{name}")

    def max_wait(self, name: str) -> float:
        """The longest any served request of ``name`` waited (still waiting ones count)."""
        now = self.clock.now()
        served = self.waits.get(name, [])
        waiting = [now - t for t in self.pending.get(name, [])]
        return max([*served, *waiting], default=0.0)

    def order(self) -> list[tuple[float, str, tuple[str, ...], str]]:
        """The swaps as (time, winner, losers, reason), names without the namespace."""
        return [
            (
                s.swap.at,
                s.swap.winner.split("/")[1],
                tuple(k.split("/")[1] for k in s.swap.losers),
                s.swap.reason,
            )
            for s in self.arbiter.swaps
        ]


def every(period_s: float, offset_s: float = 0.0) -> Callable[[float], bool]:
    """True at ``offset_s`` and every ``period_s`` after it."""
    return lambda t: t >= offset_s and (t - offset_s) % period_s == 0
