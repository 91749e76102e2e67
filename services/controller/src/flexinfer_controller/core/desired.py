"""How many replicas a Model should run now: the serverless scale-to-zero rule."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from flexinfer_common.api import ModelSpec
from flexinfer_controller.runtime.base import Replica, ReplicaState


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


def busy_until(
    last_active: datetime | None,
    replicas: Sequence[Replica],
    unloaded_at: datetime | None = None,
) -> datetime | None:
    """The moment the idle timeout counts from: the last request, or a replica coming up.

    A replica that is still starting was asked for by requests that wait in a proxy queue,
    so the model is busy now; a replica that just became ready gets a whole idle timeout
    to serve them. Counting only from the last request would let a slow engine start eat
    the idle timeout and stop the engine before the queued requests reach it.

    ``unloaded_at`` (the ``flexinfer.ai/unloaded-at`` annotation: an unload by hand) hides
    everything up to it: requests before it, and replicas started or ready before it, so
    the model goes to zero now; activity after it counts again. Being a stored moment, not
    an event, it holds across controller restarts.
    """
    moments = [last_active] if last_active is not None else []
    for replica in replicas:
        if replica.state is ReplicaState.STARTING:
            if not _before(datetime.fromtimestamp(replica.started_at, UTC), unloaded_at):
                moments.append(datetime.now(UTC))
        elif replica.ready_at is not None:
            moments.append(datetime.fromtimestamp(replica.ready_at, UTC))
    moments = [m for m in moments if not _before(m, unloaded_at)]
    return max(moments) if moments else None


def _before(moment: datetime, cutoff: datetime | None) -> bool:
    """Whether ``moment`` is at or before ``cutoff`` (never, when there is no cutoff)."""
    return cutoff is not None and moment <= cutoff
