"""P2P source metadata (P2pService): ids, publishing, freshness-aware listing, the reaper.

``mx_source_id`` is ``flexinfer_common.mx_identity.compute_mx_source_id``, the one the
workers of libs/transfer compute too.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from flexinfer_common.mx_identity import SourceIdentity, compute_mx_source_id
from flexinfer_registry.core.identity import (
    Checker,
    IdentityLimits,
    InvalidFieldsError,
    Violation,
    WorkerFields,
)
from flexinfer_registry.core.records import (
    SourceQuery,
    SourceRecord,
    SourceStatus,
)
from flexinfer_registry.core.store import SourceStore

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Publication:
    """What PublishMetadata carries, decoded at the edge (``metadata`` is the serialized
    WorkerMetadata, stored opaque; ``worker`` its fields that are checked)."""

    identity: SourceIdentity
    worker_id: str
    worker_rank: int
    status: SourceStatus
    metadata: bytes
    worker: WorkerFields = dataclasses.field(default_factory=WorkerFields)
    pod_name: str = ""
    pod_uid: str = ""
    pod_namespace: str = ""


@dataclass(frozen=True)
class ListFilter:
    """What ListSources asks for; None = any."""

    identity: SourceIdentity | None = None
    status: SourceStatus | None = None
    model_name: str | None = None
    worker_rank: int | None = None
    min_training_step: int | None = None
    min_updated_at: float | None = None
    limit: int | None = None


class SourceRegistry:
    """P2P metadata over a :class:`SourceStore`, with heartbeat freshness."""

    def __init__(
        self,
        store: SourceStore,
        *,
        heartbeat_timeout_s: float = 90.0,
        gc_timeout_s: float = 3600.0,
        clock: Callable[[], float] = time.time,
        limits: IdentityLimits | None = None,
    ) -> None:
        self.store = store
        self.heartbeat_timeout_s = heartbeat_timeout_s
        self.gc_timeout_s = gc_timeout_s
        self.clock = clock
        self.limits = limits or IdentityLimits()

    async def publish(self, publication: Publication) -> SourceRecord:
        """Store one worker's metadata; returns the stored record (with its source id).

        InvalidFieldsError, before anything is stored, for a field that breaks the rules
        of :mod:`.identity` or a new worker beyond ``limits.workers_per_source``.
        """
        check = Checker(self.limits)
        check.identity("identity", publication.identity)
        check.worker_id("worker_id", publication.worker_id, required=False)
        check.worker(publication.worker)
        check.pod(publication.pod_name, publication.pod_uid, publication.pod_namespace)
        check.done()
        worker_id = publication.worker_id or f"rank-{publication.worker_rank}"
        mx_source_id = compute_mx_source_id(publication.identity)
        await self._check_room(mx_source_id, worker_id)
        status = publication.status
        if status == SourceStatus.UNKNOWN:
            status = SourceStatus.INITIALIZING
        record = SourceRecord(
            mx_source_id=mx_source_id,
            worker_id=worker_id,
            identity=publication.identity,
            worker_rank=publication.worker_rank,
            status=status,
            updated_at=self.clock(),
            metadata=publication.metadata,
            accelerator=publication.worker.accelerator,
            topology=dict(publication.worker.topology),
            pod_name=publication.pod_name,
            pod_uid=publication.pod_uid,
            pod_namespace=publication.pod_namespace,
        )
        await self.store.publish(record)
        return record

    async def _check_room(self, mx_source_id: str, worker_id: str) -> None:
        """A new worker must fit ``limits.workers_per_source`` (a republish always does).

        Checked before the write, not atomically with it: concurrent first publishes of
        one source may overshoot the bound by at most the number in flight."""
        known = await self.store.worker_ids(mx_source_id)
        limit = self.limits.workers_per_source
        if worker_id not in known and len(known) >= limit:
            why = (
                f"source {mx_source_id} already has {len(known)} workers, the limit "
                f"(FLEXINFER_REGISTRY_LIMITS_WORKERS_PER_SOURCE={limit})"
            )
            raise InvalidFieldsError([Violation("worker_id", why)])

    async def list(self, query: ListFilter) -> list[SourceRecord]:
        """Matching workers; READY ones only while their heartbeat is fresh."""
        check = Checker(self.limits)
        if query.identity is not None:
            check.identity("identity", query.identity)
        if query.model_name is not None:
            check.model_name("model_name_filter", query.model_name, absolute_ok=True)
        check.done()
        min_updated = query.min_updated_at
        if query.status == SourceStatus.READY:
            fresh = self.clock() - self.heartbeat_timeout_s
            min_updated = fresh if min_updated is None else max(min_updated, fresh)
        store_query = SourceQuery(
            mx_source_id=None if query.identity is None else compute_mx_source_id(query.identity),
            model_name=query.model_name,
            status=query.status,
            min_updated_at=min_updated,
            worker_rank=query.worker_rank,
            limit=None if query.min_training_step is not None else query.limit,
        )
        found = await self.store.list(store_query)
        if query.min_training_step is not None:
            step = query.min_training_step
            found = [r for r in found if r.training_step is not None and r.training_step >= step]
            if query.limit is not None:
                found = found[: query.limit]
        return found

    async def get(self, mx_source_id: str, worker_id: str) -> SourceRecord | None:
        """One worker's record, or None (InvalidFieldsError for malformed ids)."""
        check = Checker(self.limits)
        check.source_id("mx_source_id", mx_source_id)
        check.worker_id("worker_id", worker_id, required=True)
        check.done()
        return await self.store.get(mx_source_id, worker_id)

    async def update_status(
        self,
        mx_source_id: str,
        worker_id: str,
        worker_rank: int,
        status: SourceStatus,
        source_load: float | None,
    ) -> bool:
        """Heartbeat/status change; an empty worker_id is found by rank (older clients)."""
        check = Checker(self.limits)
        check.source_id("mx_source_id", mx_source_id)
        check.worker_id("worker_id", worker_id, required=False)
        if source_load is not None and not (math.isfinite(source_load) and source_load >= 0):
            check.fail("source_load", f"must be a finite number >= 0, got {source_load}")
        check.done()
        if not worker_id:
            candidates = await self.store.list(
                SourceQuery(mx_source_id=mx_source_id, worker_rank=worker_rank)
            )
            if len(candidates) != 1:
                return False
            worker_id = candidates[0].worker_id
        return await self.store.update_status(
            mx_source_id, worker_id, status, source_load, now=self.clock()
        )

    async def reap(self) -> tuple[int, int]:
        """Mark silent workers STALE, delete long-STALE ones; returns (marked, deleted)."""
        now = self.clock()
        marked = await self.store.mark_stale(self.heartbeat_timeout_s, now=now)
        deleted = await self.store.gc(self.gc_timeout_s, now=now)
        if marked or deleted:
            log.info("reaper: %d sources marked STALE, %d deleted", marked, deleted)
        return marked, deleted

    async def count_ready(self) -> int:
        """READY workers with a fresh heartbeat (the active-sources gauge)."""
        return len(await self.list(ListFilter(status=SourceStatus.READY)))

    async def count_by_status(self) -> dict[str, int]:
        """Every stored worker counted by status name (all statuses, zeros included)."""
        counts = {status.name: 0 for status in SourceStatus}
        for record in await self.store.list(SourceQuery()):
            counts[record.status.name] += 1
        return counts

    async def run_reaper(
        self,
        interval_s: float,
        on_pass: Callable[[int], None] | None = None,
        on_statuses: Callable[[Mapping[str, int]], None] | None = None,
    ) -> None:
        """Reap every ``interval_s`` until cancelled; store errors are logged, not fatal.
        After each pass ``on_pass`` hears the ready count, ``on_statuses`` the counts by
        status."""
        while True:
            try:
                await self.reap()
                if on_pass is not None:
                    on_pass(await self.count_ready())
                if on_statuses is not None:
                    on_statuses(await self.count_by_status())
            except Exception:
                log.exception("reaper pass failed")
            await asyncio.sleep(interval_s)
