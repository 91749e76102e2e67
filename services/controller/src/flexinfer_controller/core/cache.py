"""The cache seam: bring a remote source's weights to a local directory before a start.

The reconciler asks ``ensure(model)`` on every reconcile of a Model whose source is remote
(hf://, s3://, gs://, ngc://). The answer is immediate: ready (with the directory), pending
(a download is running, with how far it got) or failed (the source can never be fetched as
written). The download itself runs in the background, one per Model, and the cache
re-queues the Model whenever its state moves, so a reconcile never waits on it.

The implementation that fetches through the registry's gRPC lives in
``flexinfer_controller.adapters.registry`` (the core imports no gRPC);
``NoRegistryCache`` stands in when no registry is configured.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Protocol

from flexinfer_common.api import Model

Notify = Callable[[str], None]
"""Called with a Model key (namespace/name) when its cache state changed: re-queue it."""


class CacheStatus(StrEnum):
    """Where a Model's weights are."""

    READY = "Ready"
    PENDING = "Pending"
    FAILED = "Failed"


@dataclass(frozen=True, slots=True)
class DownloadProgress:
    """How far a download got: a fraction in [0, 1] when the total is known, and bytes."""

    fraction: float | None = None
    bytes_done: int | None = None
    bytes_total: int | None = None

    @property
    def percent(self) -> int | None:
        """Whole percent (None: unknown total)."""
        return None if self.fraction is None else int(self.fraction * 100)


@dataclass(frozen=True, slots=True)
class CacheState:
    """One answer of ``ModelCache.ensure``; build it with the class methods."""

    status: CacheStatus
    reason: str
    message: str
    path: Path | None = None
    progress: DownloadProgress | None = None
    strategy: str | None = None
    """The cache's strategy as status.cache reports it (None: the registry cache's own,
    ``Registry``; the kubernetes gate gives its CachePlan's: SharedPVC, Memory, Local, None)."""

    @classmethod
    def ready(cls, path: Path, message: str) -> CacheState:
        """The weights are in ``path``."""
        return cls(CacheStatus.READY, "Cached", message, path=path)

    @classmethod
    def pending(
        cls, reason: str, message: str, progress: DownloadProgress | None = None
    ) -> CacheState:
        """Not yet: ``reason`` (Downloading, RegistryUnavailable...) says why."""
        return cls(CacheStatus.PENDING, reason, message, progress=progress)

    @classmethod
    def failed(cls, reason: str, message: str) -> CacheState:
        """Never as written (not found, bad source, denied): the spec must change."""
        return cls(CacheStatus.FAILED, reason, message)


class ModelCache(Protocol):
    """Fetches remote sources into local directories, in the background."""

    def ensure(self, model: Model) -> CacheState:
        """The state of ``model``'s weights now; starts (or keeps) its download."""

    async def release(self, key: str) -> None:
        """The Model ``key`` is gone: stop its download and remove its files."""

    async def close(self) -> None:
        """Stop every download (the files already complete stay for the next start)."""


REGISTRY_NOT_CONFIGURED = "RegistryNotConfigured"


class NoRegistryCache:
    """No registry to fetch through: remote sources wait, and say what would fix it."""

    def ensure(self, model: Model) -> CacheState:
        """Pending, naming the setting that enables fetching."""
        scheme = model.spec.source.partition("://")[0].lower()
        return CacheState.pending(
            REGISTRY_NOT_CONFIGURED,
            f"{scheme}:// sources are fetched through the registry, and none is configured: "
            "set FLEXINFER_CONTROLLER_REGISTRY_ADDRESS to its gRPC host:port (flexinfer up "
            "does), or use a file:///absolute/dir source",
        )

    async def release(self, key: str) -> None:
        """Nothing was fetched."""

    async def close(self) -> None:
        """Nothing runs."""
