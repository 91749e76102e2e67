"""Events on a Model: what the controller did to it and why (a swap, a sleep, a wake), as
``kubectl describe model`` shows them on Kubernetes.

``ModelEvents.record`` never blocks and never fails the reconcile that calls it: an Event is
a courtesy to the operator, written in the background. ``LogEvents`` (no apiserver: the
local runtime) writes each to the log; ``adapters/kube/events.KubeEvents`` writes core/v1
Events involving the Model.
"""

from __future__ import annotations

import logging
from typing import Protocol

log = logging.getLogger(__name__)


class ModelEvents(Protocol):
    """Records an Event on Model ``key``."""

    def record(self, key: str, reason: str, message: str, *, warning: bool = False) -> None:
        """Record that ``reason`` (CamelCase) happened to ``key``, as ``message`` tells."""
        ...

    async def aclose(self) -> None:
        """Wait for the Events still being written."""
        ...


class LogEvents:
    """Events as log lines."""

    def record(self, key: str, reason: str, message: str, *, warning: bool = False) -> None:
        """Log it (at warning level for a Warning)."""
        log.log(logging.WARNING if warning else logging.INFO, "%s: %s: %s", key, reason, message)

    async def aclose(self) -> None:
        """Nothing is pending."""
