"""Reconcile one ModelCatalog: sync it when it is due, write its status, schedule the next.

Level-triggered and idempotent, as ``core.reconciler``: every call reads the catalog and
decides from what is stored, so a reconcile queued by an informer, the admin API, a timer
or the periodic resync does the same thing. A catalog is due when

* it was never synced, or its ``Synced`` condition was observed for an older generation
  (it was created, or its spec changed);
* ``spec.syncInterval`` has passed since ``status.lastSyncTime``;
* its last sync left a registry failing temporarily, and the backoff has passed.

A permanent failure (a refused secret, a bad reference) is written to status and waits
for the next interval or a spec change. A catalog that is gone, or being deleted, is
forgotten: no timer of it syncs anything again. Writes are conditional on the
resourceVersion read, so a spec changed during a sync is synced again, never overwritten.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from flexinfer_common.api import ModelCatalog
from flexinfer_common.errors import NotFoundError, TemporaryError
from flexinfer_common.store import ModelStore
from flexinfer_controller.catalog.registries import RegistryResult, SyncOptions, sync_catalog
from flexinfer_controller.catalog.secrets import SecretSource
from flexinfer_controller.catalog.status import (
    SYNCED,
    build_status,
    condition,
    retrying,
)

log = logging.getLogger(__name__)
MIN_INTERVAL_S = 1.0  # a zero syncInterval must not turn into a hot loop against a registry

Requeue = Callable[[str, float], None]
"""Queues a reconcile of a key after a delay in seconds."""


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Backoff after a temporary registry failure: doubling, within [initial, max]."""

    initial_s: float = 5.0
    max_s: float = 300.0

    def next(self, previous: float | None, hint: float) -> float:
        """The delay after ``previous`` (None: the first failure); at least ``hint``."""
        delay = self.initial_s if previous is None else previous * 2
        return min(self.max_s, max(delay, hint))


@dataclass
class CatalogReconciler:
    """Syncs due catalogs and writes their status; knows nothing of queues or HTTP."""

    store: ModelStore
    secrets: SecretSource
    requeue: Requeue
    options: SyncOptions = field(default_factory=SyncOptions)
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    syncs: int = field(default=0, init=False)
    """Syncs run (tests watch it)."""
    _backoff: dict[str, float] = field(default_factory=dict, init=False)
    """The current retry delay of each catalog whose last sync failed temporarily."""

    async def reconcile(self, key: str) -> None:
        """Sync the catalog ``key`` if it is due, else queue it for when it will be."""
        namespace, _, name = key.partition("/")
        try:
            catalog = await self.store.get_catalog(namespace, name)
        except NotFoundError:
            self._forget(key)
            return
        if catalog.metadata.deletion_timestamp is not None:
            self._forget(key)
            return
        wait = self.due_in(catalog)
        if wait > 0:
            self.requeue(key, wait)
            return
        await self._sync(catalog)

    def due_in(self, catalog: ModelCatalog) -> float:
        """Seconds until the catalog is due (zero or less: due now)."""
        synced = condition(catalog, SYNCED)
        last = catalog.status.last_sync_time
        if synced is None or last is None:
            return 0.0
        if synced.observed_generation != catalog.metadata.generation:
            return 0.0
        period = _interval(catalog)
        if retrying(catalog):
            period = min(period, self._backoff.get(catalog.key, self.retry.initial_s))
        return period - (self.clock() - last).total_seconds()

    async def _sync(self, catalog: ModelCatalog) -> None:
        key, meta = catalog.key, catalog.metadata
        self.syncs += 1
        results = await sync_catalog(catalog, self.secrets, self.options)
        status = build_status(catalog, results, self.clock())
        try:
            await self.store.update_catalog_status(
                meta.namespace, meta.name, status, meta.resource_version
            )
        except NotFoundError:
            self._forget(key)  # deleted while it synced
            return
        self.requeue(key, self._next_delay(catalog, results))
        for result in results:
            if result.error is not None:
                log.info("catalog %s: %s: %s", key, result.label, result.error)

    def _next_delay(self, catalog: ModelCatalog, results: Sequence[RegistryResult]) -> float:
        interval = _interval(catalog)
        temporary = [r.error for r in results if isinstance(r.error, TemporaryError)]
        if not temporary:
            self._backoff.pop(catalog.key, None)
            return interval
        hint = max(e.delay for e in temporary)
        delay = min(interval, self.retry.next(self._backoff.get(catalog.key), hint))
        self._backoff[catalog.key] = delay
        return delay

    def _forget(self, key: str) -> None:
        self._backoff.pop(key, None)


def _interval(catalog: ModelCatalog) -> float:
    return max(MIN_INTERVAL_S, catalog.spec.sync_interval.total_seconds())
