"""How many replicas a Model should run now: the serverless scale-to-zero rule."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from flexinfer_common.api import ModelSpec


@dataclass(frozen=True, slots=True)
class Desired:
    """The replica count a Model wants, and when that answer next changes by itself."""

    replicas: int
    idle_at: datetime | None
    """When the idle timeout expires and ``replicas`` drops (None: no expiry pending)."""


def desired_replicas(spec: ModelSpec, last_active: datetime | None, now: datetime) -> Desired:
    """min(max(minReplicas, 1 if active else 0), maxReplicas); at least 1 without serverless."""
    serverless = spec.serverless_or_default
    if not serverless.enabled:
        # The operator's GetMinReplicas(): a non-serverless model always has one replica.
        return Desired(replicas=max(1, serverless.min_replicas), idle_at=None)
    floor = serverless.min_replicas
    if not serverless.scale_to_zero:
        floor = max(floor, 1)
    active = False
    idle_at: datetime | None = None
    if last_active is not None:
        deadline = last_active + serverless.idle_timeout
        active = now < deadline
        if active:
            idle_at = deadline
    wanted = max(floor, 1 if active else 0)
    wanted = min(wanted, serverless.max_replicas)
    if wanted <= floor:
        # Idle expiry would change nothing: the floor holds the count anyway.
        idle_at = None
    return Desired(replicas=wanted, idle_at=idle_at)
