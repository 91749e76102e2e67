"""The two store interfaces behind the registry: cached models and P2P sources.

Every implementation (memory, Redis, SQL, Kubernetes) must pass the contract suite in
:mod:`flexinfer_registry.testing.store_contract`. Time is always passed in (``now``, Unix
seconds) rather than read from a clock inside the store, so replicas agree on what they
write and tests control time.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

from flexinfer_registry.core.records import (
    ModelRecord,
    ModelStatus,
    Provider,
    SourceQuery,
    SourceRecord,
    SourceStatus,
)

MATCH_WINDOW_S = 0.0005
"""``delete_if`` treats timestamps this close as equal: stores keep at least milliseconds."""


def claimable(record: ModelRecord, now: float, stale_after: float | None) -> bool:
    """Whether ``try_claim`` may take ``record`` over: ERROR, or DOWNLOADING gone stale."""
    if record.status == ModelStatus.ERROR:
        return True
    return (
        record.status == ModelStatus.DOWNLOADING
        and stale_after is not None
        and record.updated_at < now - stale_after
    )


def unchanged(record: ModelRecord, status: ModelStatus, updated_at: float) -> bool:
    """Whether ``delete_if(status, updated_at)`` applies to ``record`` (within the window)."""
    return record.status == status and abs(record.updated_at - updated_at) <= MATCH_WINDOW_S


class ModelRegistryStore(ABC):
    """Cached-model records keyed by model name (the seed's RegistryBackend).

    Atomicity contract: every method is one atomic step as seen by every other replica
    sharing the store. Readers see a record before or after a write, never half of one.
    """

    @abstractmethod
    async def get(self, name: str) -> ModelRecord | None:
        """The record for ``name``, or None."""

    @abstractmethod
    async def try_claim(
        self, name: str, provider: Provider, *, now: float, stale_after: float | None = None
    ) -> bool:
        """Atomically claim ``name`` for download; exactly one concurrent caller wins.

        Succeeds (and sets status DOWNLOADING, provider, ``updated_at = last_used_at = now``,
        message None) when no record exists (``created_at = now``), when the record is ERROR
        (a retry), or when it is DOWNLOADING with ``updated_at < now - stale_after`` (its
        downloader died). A reclaimed record keeps its ``created_at``. A DOWNLOADED record,
        or a live DOWNLOADING one, is never claimed: returns False and changes nothing.
        """

    @abstractmethod
    async def set_status(
        self,
        name: str,
        provider: Provider,
        status: ModelStatus,
        message: str | None,
        *,
        now: float,
    ) -> None:
        """Upsert status, provider and message; ``updated_at = last_used_at = now``.

        Creates the record (``created_at = now``) when missing; otherwise ``created_at``
        is preserved.
        """

    @abstractmethod
    async def touch(self, name: str, *, now: float) -> bool:
        """Set ``last_used_at = now`` if the record exists (never creates); True if it did."""

    @abstractmethod
    async def delete(self, name: str) -> bool:
        """Remove the record; True if one existed."""

    @abstractmethod
    async def delete_if(self, name: str, status: ModelStatus, updated_at: float) -> bool:
        """Remove the record only if it still has ``status`` and ``updated_at`` (to within
        half a millisecond): compare-and-delete. Of several replicas that judged one record,
        exactly one removes it, and none removes a record written since. True if removed.
        """

    @abstractmethod
    async def list_by_last_used(self, limit: int | None = None) -> list[ModelRecord]:
        """Every record, least recently used first (ties by name), at most ``limit``."""

    @abstractmethod
    async def status_counts(self) -> dict[ModelStatus, int]:
        """How many records are in each status (statuses with none may be absent)."""

    @abstractmethod
    async def close(self) -> None:
        """Release connections; idempotent."""


class SourceStore(ABC):
    """P2P source workers keyed by (mx_source_id, worker_id).

    Atomicity contract: each method is atomic per worker record; ``mark_stale`` and ``gc``
    may interleave with other writes worker by worker, but never mark or delete a worker
    whose ``updated_at`` was refreshed past the cut-off before they examined it.
    """

    @abstractmethod
    async def publish(self, record: SourceRecord) -> None:
        """Insert or wholly replace the worker's record (PublishMetadata)."""

    @abstractmethod
    async def list(self, query: SourceQuery) -> list[SourceRecord]:
        """Workers matching ``query``, ordered by (mx_source_id, worker_rank, worker_id)."""

    @abstractmethod
    async def get(self, mx_source_id: str, worker_id: str) -> SourceRecord | None:
        """One worker's record, or None."""

    async def worker_ids(self, mx_source_id: str) -> set[str]:
        """The worker ids the source has (PublishMetadata's workers-per-source bound).

        Through :meth:`list` by default; backends that can answer without reading every
        worker's metadata override it."""
        return {r.worker_id for r in await self.list(SourceQuery(mx_source_id=mx_source_id))}

    @abstractmethod
    async def update_status(
        self,
        mx_source_id: str,
        worker_id: str,
        status: SourceStatus,
        source_load: float | None,
        *,
        now: float,
    ) -> bool:
        """Set status and ``updated_at = now`` on an existing worker (never creates).

        ``source_load`` replaces the stored load when not None and keeps it otherwise.
        Returns False when the worker is unknown.
        """

    @abstractmethod
    async def mark_stale(self, heartbeat_timeout: float, *, now: float) -> int:
        """Mark STALE every non-STALE worker with ``updated_at < now - heartbeat_timeout``.

        ``updated_at`` is left unchanged, so GC measures age from the last heartbeat.
        Returns how many were marked.
        """

    @abstractmethod
    async def gc(self, stale_age: float, *, now: float) -> int:
        """Delete every STALE worker with ``updated_at < now - stale_age``; returns the count."""

    @abstractmethod
    async def close(self) -> None:
        """Release connections; idempotent."""


@dataclass
class Stores:
    """The pair of stores one registry uses; both usually share one backend connection."""

    models: ModelRegistryStore
    sources: SourceStore

    async def close(self) -> None:
        """Close both stores."""
        try:
            await self.models.close()
        finally:
            await self.sources.close()
