"""Anti-thrashing policies: the constants that gate a swap, for both sharing mechanisms.

``shared_policy`` is the v1alpha2 ``spec.gpu.shared`` behaviour (the seed's
``sharedDemandWindow`` 2 min, queue threshold 1, ``sharedSwapCooldown`` 5 min, no
preemption cooldown, no hysteresis); ``gpugroup_policy`` the v1alpha1 GPUGroup's
``spec.antiThrashing`` (minimumRunDurationSeconds 30, cooldownAfterPreemptionSeconds 60,
requestQueueThreshold 3, hysteresisWindowSeconds 10). ``starvation_s`` (aging) is
FlexInfer's own: a Model whose demand waited that long passes the priority gate.
"""

from __future__ import annotations

from dataclasses import dataclass

from flexinfer_common.api.gpugroup import AntiThrashing, ScalingPolicy

SHARED_DEMAND_WINDOW_S = 120.0
"""``sharedDemandWindow``: a demand signal counts for 2 min after it was last seen."""
SHARED_SWAP_COOLDOWN_S = 300.0
"""``sharedSwapCooldown``: a winner keeps the GPU at least 5 min (``gpu.swapCooldown``)."""
SHARED_QUEUE_THRESHOLD = 1
"""Any queued request is demand (v1alpha2)."""
SHARED_STARVATION_S = 600.0
"""Aging (v1alpha2 default): after 10 min of unserved demand, any priority may preempt."""
GROUP_STARVATION_S = 300.0
"""Aging (GPUGroup default): 5 min, the GPUGroup's windows being shorter."""
DRAIN_POLL_S = 0.5
"""How often a draining engine's metrics are read: a request ending is seen within it."""
SHARED_DRAIN_S = 30.0
"""A preempted Model's running requests get 30 s to finish before its engine stops: long
enough for a typical completion, short against a 5 min swap cooldown."""


@dataclass(frozen=True, slots=True)
class SwapPolicy:
    """When a Model with demand may take a shared GPU from the Models holding it."""

    name: str
    queue_threshold: int
    """Requests that must wait before the demand may preempt (a free GPU is taken anyway)."""
    demand_window_s: float
    """A queue report counts this long after it was last repeated; a holder with no demand
    for this long is idle and yields to any claimant, whatever the priorities."""
    hysteresis_s: float
    """A queue must have persisted this long before it may preempt (0: at once)."""
    swap_cooldown_s: float
    """A Model that got the GPU keeps it at least this long (per Model: ``gpu.swapCooldown``)."""
    preemption_cooldown_s: float
    """A preempted Model may not preempt back for this long."""
    starvation_s: float
    """Aging: demand unserved this long passes the priority gate (0: never)."""
    drain_timeout_s: float = SHARED_DRAIN_S
    """A loser's engine stops once no request runs on it, or after this long (0: at once;
    GPUGroup: ``scalingPolicy.drainTimeoutSeconds``)."""

    def __post_init__(self) -> None:
        if self.queue_threshold < 1:
            raise ValueError("queue_threshold must be at least 1")
        times = (self.demand_window_s, self.hysteresis_s, self.swap_cooldown_s)
        if min(*times, self.preemption_cooldown_s, self.starvation_s, self.drain_timeout_s) < 0:
            raise ValueError("policy durations must not be negative")


def shared_policy(
    *,
    starvation_s: float = SHARED_STARVATION_S,
    demand_window_s: float = SHARED_DEMAND_WINDOW_S,
    swap_cooldown_s: float = SHARED_SWAP_COOLDOWN_S,
    drain_timeout_s: float = SHARED_DRAIN_S,
) -> SwapPolicy:
    """The v1alpha2 ``spec.gpu.shared`` policy (the seed's constants by default)."""
    return SwapPolicy(
        name="shared",
        queue_threshold=SHARED_QUEUE_THRESHOLD,
        demand_window_s=demand_window_s,
        hysteresis_s=0.0,
        swap_cooldown_s=swap_cooldown_s,
        preemption_cooldown_s=0.0,
        starvation_s=starvation_s,
        drain_timeout_s=drain_timeout_s,
    )


def gpugroup_drain_s(scaling: ScalingPolicy | None) -> float:
    """A GPUGroup's drain grace: ``drainTimeoutSeconds`` (60 s by default), or 0 when its
    ``preemptionPolicy`` is ``Immediate``."""
    scaling = scaling or ScalingPolicy()
    if scaling.preemption_policy == "Immediate":
        return 0.0
    return float(scaling.drain_timeout_seconds)


def gpugroup_policy(
    anti: AntiThrashing | None = None,
    *,
    starvation_s: float = GROUP_STARVATION_S,
    demand_window_s: float = SHARED_DEMAND_WINDOW_S,
    scaling: ScalingPolicy | None = None,
) -> SwapPolicy:
    """The v1alpha1 GPUGroup policy from its ``spec.antiThrashing`` (defaults when unset)
    and the drain grace of its ``spec.scalingPolicy``; ``enabled: false`` turns every
    anti-thrashing gate off, as in the seed."""
    anti = anti or AntiThrashing()
    drain = gpugroup_drain_s(scaling)
    if not anti.enabled:
        return SwapPolicy("gpugroup", 1, demand_window_s, 0.0, 0.0, 0.0, starvation_s, drain)
    return SwapPolicy(
        name="gpugroup",
        queue_threshold=anti.request_queue_threshold,
        demand_window_s=demand_window_s,
        hysteresis_s=float(anti.hysteresis_window_seconds),
        swap_cooldown_s=float(anti.minimum_run_duration_seconds),
        preemption_cooldown_s=float(anti.cooldown_after_preemption_seconds),
        starvation_s=starvation_s,
        drain_timeout_s=drain,
    )
