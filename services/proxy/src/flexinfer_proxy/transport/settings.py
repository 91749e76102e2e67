"""What every upstream transport is configured with (from ProxySettings)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class TransportSettings:
    """Timeouts and pool sizes; see ProxySettings for each default and why."""

    connect_timeout_s: float
    """Seconds to open a connection to an engine."""
    read_timeout_s: float
    """Seconds the engine may stay silent: before the answer's head, and between chunks."""
    max_connections: int
    """Upstream connections open at once, over every engine."""
    max_idle: int
    """Idle keep-alive connections kept per engine."""
    keepalive_s: float = 4.0
    """Seconds an idle connection is kept for reuse."""
