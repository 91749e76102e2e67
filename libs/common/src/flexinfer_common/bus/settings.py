"""How a service's bus client rides out a bus that is not there yet or lost its data.

``BusClientSettings`` shares the ``FLEXINFER_BUS_`` prefix with ``BusSettings`` (which says
which bus); this group says how long to wait for it at start and what to re-publish after
Redis restarted empty.
"""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class BusClientSettings(BaseSettings):
    """Start-up wait and replay window of the event bus client (``FLEXINFER_BUS_*``)."""

    model_config = SettingsConfigDict(env_prefix="FLEXINFER_BUS_", extra="ignore")

    connect_timeout_s: float = Field(default=20.0, gt=0)
    """Seconds a starting service keeps trying to reach the bus before it exits with an
    error: a Redis container started alongside (compose, a pod's neighbour) answers within
    a few seconds, and a wrong URL is still reported within half a minute."""

    replay_window_s: float = Field(default=60.0, ge=0)
    """Seconds of this process's published events kept in memory to publish again if Redis
    restarts without its data (no AOF/RDB): far longer than a consumer takes to read an
    event, even across its retries during the outage. 0 turns replay off."""
