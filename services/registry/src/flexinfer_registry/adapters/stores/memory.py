"""In-process stores for embedded mode and tests: dicts behind one lock.

Every method runs without awaiting between its read and its write, so on one event loop
each is atomic; the lock additionally serialises callers on other threads' loops sharing
one instance (it is a threading lock held only for dict operations, never across awaits).
"""

from __future__ import annotations

import dataclasses
import threading
from collections import Counter

from flexinfer_registry.core.records import (
    ModelRecord,
    ModelStatus,
    Provider,
    SourceQuery,
    SourceRecord,
    SourceStatus,
    source_sort_key,
)
from flexinfer_registry.core.store import (
    ModelRegistryStore,
    SourceStore,
    Stores,
    claimable,
    unchanged,
)
from flexinfer_registry.settings import RegistrySettings


class MemoryModelStore(ModelRegistryStore):
    """Cached-model records in a dict."""

    def __init__(self) -> None:
        self._records: dict[str, ModelRecord] = {}
        self._lock = threading.Lock()

    async def get(self, name: str) -> ModelRecord | None:
        """The record for ``name``, or None."""
        with self._lock:
            return self._records.get(name)

    async def try_claim(
        self, name: str, provider: Provider, *, now: float, stale_after: float | None = None
    ) -> bool:
        """Claim when absent, ERROR, or a DOWNLOADING claim older than ``stale_after``."""
        with self._lock:
            current = self._records.get(name)
            if current is not None and not claimable(current, now, stale_after):
                return False
            created = current.created_at if current is not None else now
            self._records[name] = ModelRecord(
                name=name,
                provider=provider,
                status=ModelStatus.DOWNLOADING,
                created_at=created,
                last_used_at=now,
                updated_at=now,
                message=None,
            )
            return True

    async def set_status(
        self,
        name: str,
        provider: Provider,
        status: ModelStatus,
        message: str | None,
        *,
        now: float,
    ) -> None:
        """Upsert status/provider/message, preserving ``created_at``."""
        with self._lock:
            current = self._records.get(name)
            self._records[name] = ModelRecord(
                name=name,
                provider=provider,
                status=status,
                created_at=current.created_at if current is not None else now,
                last_used_at=now,
                updated_at=now,
                message=message,
            )

    async def touch(self, name: str, *, now: float) -> bool:
        """Update-only ``last_used_at``."""
        with self._lock:
            current = self._records.get(name)
            if current is None:
                return False
            self._records[name] = dataclasses.replace(current, last_used_at=now)
            return True

    async def delete(self, name: str) -> bool:
        """Remove the record; True if one existed."""
        with self._lock:
            return self._records.pop(name, None) is not None

    async def delete_if(self, name: str, status: ModelStatus, updated_at: float) -> bool:
        """Compare-and-delete under the lock."""
        with self._lock:
            current = self._records.get(name)
            if current is None or not unchanged(current, status, updated_at):
                return False
            del self._records[name]
            return True

    async def list_by_last_used(self, limit: int | None = None) -> list[ModelRecord]:
        """Least recently used first."""
        with self._lock:
            records = sorted(self._records.values(), key=lambda r: (r.last_used_at, r.name))
        return records if limit is None else records[: max(0, limit)]

    async def status_counts(self) -> dict[ModelStatus, int]:
        """Records per status."""
        with self._lock:
            return dict(Counter(r.status for r in self._records.values()))

    async def close(self) -> None:
        """Nothing to release."""


class MemorySourceStore(SourceStore):
    """P2P worker records in a dict keyed by (mx_source_id, worker_id)."""

    def __init__(self) -> None:
        self._records: dict[tuple[str, str], SourceRecord] = {}
        self._lock = threading.Lock()

    async def publish(self, record: SourceRecord) -> None:
        """Insert or replace the worker."""
        with self._lock:
            self._records[(record.mx_source_id, record.worker_id)] = record

    async def list(self, query: SourceQuery) -> list[SourceRecord]:
        """Matching workers in the contract's order."""
        with self._lock:
            found = sorted(filter(query.matches, self._records.values()), key=source_sort_key)
        return found if query.limit is None else found[: max(0, query.limit)]

    async def get(self, mx_source_id: str, worker_id: str) -> SourceRecord | None:
        """One worker, or None."""
        with self._lock:
            return self._records.get((mx_source_id, worker_id))

    async def update_status(
        self,
        mx_source_id: str,
        worker_id: str,
        status: SourceStatus,
        source_load: float | None,
        *,
        now: float,
    ) -> bool:
        """Update-only status, heartbeat time and (when given) load."""
        key = (mx_source_id, worker_id)
        with self._lock:
            current = self._records.get(key)
            if current is None:
                return False
            load = current.source_load if source_load is None else source_load
            self._records[key] = dataclasses.replace(
                current, status=status, updated_at=now, source_load=load
            )
            return True

    async def mark_stale(self, heartbeat_timeout: float, *, now: float) -> int:
        """STALE for every silent non-STALE worker."""
        cutoff = now - heartbeat_timeout
        with self._lock:
            keys = [
                k
                for k, r in self._records.items()
                if r.status != SourceStatus.STALE and r.updated_at < cutoff
            ]
            for key in keys:
                self._records[key] = dataclasses.replace(
                    self._records[key], status=SourceStatus.STALE
                )
        return len(keys)

    async def gc(self, stale_age: float, *, now: float) -> int:
        """Delete STALE workers silent for longer than ``stale_age``."""
        cutoff = now - stale_age
        with self._lock:
            keys = [
                k
                for k, r in self._records.items()
                if r.status == SourceStatus.STALE and r.updated_at < cutoff
            ]
            for key in keys:
                del self._records[key]
        return len(keys)

    async def close(self) -> None:
        """Nothing to release."""


async def create_stores(settings: RegistrySettings) -> Stores:
    """Fresh, empty in-process stores (``store=memory``)."""
    return Stores(models=MemoryModelStore(), sources=MemorySourceStore())
