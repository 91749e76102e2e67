"""What the registry says about itself: version, uptime, and answers to ApiService actions."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from importlib import metadata


def package_version() -> str:
    """The installed flexinfer-registry version ("0+unknown" when run from a bare tree)."""
    try:
        return metadata.version("flexinfer-registry")
    except metadata.PackageNotFoundError:
        return "0+unknown"


@dataclass(frozen=True)
class ApiAnswer:
    """The outcome of one ApiService request."""

    success: bool
    data: bytes | None = None
    error: str | None = None


@dataclass
class ServerInfo:
    """Version and start time of this registry process."""

    version: str = field(default_factory=package_version)
    started: float = field(default_factory=time.monotonic)

    def uptime_seconds(self) -> int:
        """Whole seconds since the server started."""
        return max(0, int(time.monotonic() - self.started))

    def answer(self, action: str, payload: bytes | None) -> ApiAnswer:
        """Answer a generic ModelExpress ApiRequest; only ``ping`` exists today."""
        if action == "ping":
            return ApiAnswer(success=True, data=b"pong")
        # repr() keeps a hostile action (huge, control characters) harmless in the reply.
        shown = repr(action[:40])[:80]
        return ApiAnswer(success=False, error=f"unknown action {shown}; supported: ping")
