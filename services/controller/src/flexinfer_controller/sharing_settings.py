"""GPU sharing in the running controller (``FLEXINFER_CONTROLLER_GPU_SHARING_*``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from flexinfer_controller.core.sharing.policy import (
    DRAIN_POLL_S,
    SHARED_DEMAND_WINDOW_S,
    SHARED_DRAIN_S,
    SHARED_STARVATION_S,
    SHARED_SWAP_COOLDOWN_S,
)


class GPUSharingSettings(BaseSettings):
    """Whether the arbiter decides who holds a ``spec.gpu.shared`` group's GPU, and its
    v1alpha2 anti-thrashing constants (docs/gpu-sharing.md)."""

    model_config = SettingsConfigDict(
        env_prefix="FLEXINFER_CONTROLLER_GPU_SHARING_", extra="ignore"
    )

    mode: Literal["none", "arbiter"] = "none"
    """``arbiter``: members of a shared group take turns on its GPU by demand, priority and
    VRAM. ``none`` (the default) runs every Model that wants replicas, as before the arbiter
    existed: turning it on can preempt running Models, so an upgrade must not do it by
    itself, and a group whose members fit side by side needs no arbiter at all."""

    demand_window_s: float = Field(default=SHARED_DEMAND_WINDOW_S, gt=0)
    """``sharedDemandWindow``: a proxy's queue report counts this long, and a holder without
    demand this long is idle (yields to an equal priority)."""

    swap_cooldown_s: float = Field(default=SHARED_SWAP_COOLDOWN_S, ge=0)
    """``sharedSwapCooldown``: a Model that got the GPU keeps it at least this long, unless
    its own ``spec.gpu.swapCooldown`` says otherwise."""

    starvation_s: float = Field(default=SHARED_STARVATION_S, ge=0)
    """Aging: demand unserved this long may preempt any priority (0: never, the seed's)."""

    drain_timeout_s: float = Field(default=SHARED_DRAIN_S, ge=0)
    """A preempted Model's engine stops once it runs no request, or after this grace
    (0: at once). 30 s lets a typical completion finish; requests that arrive meanwhile
    queue in the proxy for the winner. GPUGroups set theirs in ``scalingPolicy``."""

    drain_poll_s: float = Field(default=DRAIN_POLL_S, gt=0)
    """How often a draining engine's metrics are read: the swap goes on within this
    long of its last request ending."""
