"""The engine side of adapter loading: what an engine holds, load and unload, and errors.

The HTTP implementation lives in ``flexinfer_controller.adapters.lora`` (the core imports
no HTTP client). Every answer comes from the engine itself: what it lists is what it holds,
so a restarted engine that lost its adapters is seen as such at the next reconcile.
"""

from __future__ import annotations

from typing import Protocol

from flexinfer_common.errors import PermanentError, TemporaryError
from flexinfer_controller.backends import AdapterEndpoints


class EngineRefusedError(PermanentError):
    """The engine answered a load or unload with a 4xx: the same request fails again."""

    def __init__(self, message: str, *, status: int) -> None:
        super().__init__(message, status_reason="LoadFailed")
        self.status = status


class EngineUnavailableError(TemporaryError):
    """The engine could not be reached, timed out or answered 5xx: try again later."""

    def __init__(self, message: str, *, delay: float = 1.0) -> None:
        super().__init__(message, delay=delay, status_reason="EngineUnavailable")


class AdapterEngine(Protocol):
    """Talks to one engine (``url``: its base URL) through the backend's adapter API."""

    async def listed(self, url: str, api: AdapterEndpoints) -> dict[str, str | None]:
        """Adapters the engine holds now: name -> the path it was loaded from (None when
        the engine does not say)."""

    async def load(self, url: str, api: AdapterEndpoints, name: str, path: str) -> None:
        """Load adapter ``name`` from ``path``; EngineRefusedError, EngineUnavailableError."""

    async def unload(self, url: str, api: AdapterEndpoints, name: str) -> None:
        """Unload ``name``; one the engine does not hold counts as unloaded."""
