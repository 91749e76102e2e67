"""Admin operations on LoRAAdapters: store writes, change events and reconcile triggers.

The adapter loop (``core.lora``) loads each adapter into the engines of its base Model;
this service writes what the admin API is given, tells the proxies (``AdapterEvents``) and
queues the adapter loop for the base Model. A new adapter starts Pending until the loop's
first pass writes where it stands.

On Kubernetes adapters are also applied with kubectl: an ``AdapterFeed`` (the apiserver's
informers) reports those changes, and ``AdapterService.observed`` gives them the bus event
and the reconcile the admin API would have.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

from flexinfer_common.api import Condition, LoRAAdapter, LoRAAdapterPhase, LoRAAdapterStatus
from flexinfer_common.bus import EventBus, topics
from flexinfer_common.errors import BusError, ConflictError, NotFoundError
from flexinfer_common.store import ModelStore
from flexinfer_controller.core.lora.finalizer import keep_finalizer

log = logging.getLogger(__name__)

LOADED = "Loaded"
RECONCILING = "Reconciling"


def pending_status(adapter: LoRAAdapter) -> LoRAAdapterStatus:
    """The status of an adapter the adapter loop has not looked at yet: Pending, and why."""
    message = (
        f"adapter {adapter.spec.adapter_name!r} is waiting to be loaded into the engines of "
        f"Model {adapter.model_key}"
    )
    condition = Condition(
        type=LOADED,
        status="False",
        reason=RECONCILING,
        message=message,
        observed_generation=adapter.metadata.generation,
    )
    return LoRAAdapterStatus(
        phase=LoRAAdapterPhase.PENDING, conditions=[condition], message=message
    )


AdapterChanged = Callable[[LoRAAdapter, bool], Awaitable[None]]
"""Called with (adapter, deleted) for every change an AdapterFeed sees."""
Enqueue = Callable[[str], object]
"""Queues the adapter loop for a base Model key."""


class AdapterFeed(Protocol):
    """Reports LoRAAdapter changes made behind the admin API's back, until cancelled."""

    async def run(self, changed: AdapterChanged) -> None:
        """Await ``changed`` for every change; returns at once when there is nothing to watch."""


class NoAdapterFeed:
    """The SQL store's feed: only the admin API writes adapters, and it publishes itself."""

    async def run(self, changed: AdapterChanged) -> None:
        """Nothing to watch."""


class AdapterEvents:
    """Publishes AdapterChangedEvents: the proxies re-read adapters on each."""

    def __init__(self, bus: EventBus) -> None:
        self._bus = bus
        # Last generation published per key (0: deleted), so an informer's echo of a write
        # already published (the admin API's, the adapter loop's) is not published twice.
        self._published: dict[str, int] = {}

    def seen(self, adapter: LoRAAdapter, deleted: bool) -> bool:
        """Whether this change (its generation, or its deletion) was published already."""
        if deleted:
            return self._published.get(adapter.key) == 0
        return self._published.get(adapter.key) == (adapter.metadata.generation or 0)

    async def publish(self, adapter: LoRAAdapter, deleted: bool) -> None:
        """Tell the proxies ``adapter`` changed (its status too), or is gone."""
        event = topics.AdapterChangedEvent(
            adapter=adapter.key,
            model=adapter.model_key,
            generation=0 if deleted else adapter.metadata.generation or 0,
            deleted=deleted,
        )
        self._published[adapter.key] = event.generation
        try:
            await self._bus.publish(topics.ADAPTERS, event.model_dump(mode="json"))
        except BusError as exc:
            # The store is the source of truth and the proxies' periodic resync catches up.
            log.warning("could not publish %s change: %s", adapter.key, exc)


class AdapterService:
    """What the admin API does with LoRAAdapters; knows nothing of HTTP."""

    def __init__(self, store: ModelStore, events: AdapterEvents, enqueue: Enqueue) -> None:
        self._store = store
        self._events = events
        self._enqueue = enqueue

    async def create(self, adapter: LoRAAdapter) -> LoRAAdapter:
        """Insert a new LoRAAdapter (status Pending); ConflictError if it exists."""
        adapter.metadata.resource_version = None
        adapter.status = pending_status(adapter)
        stored = await self._store.create_adapter(adapter)
        await self._changed(stored)
        return stored

    async def apply(self, adapter: LoRAAdapter) -> tuple[LoRAAdapter, bool]:
        """Create or replace; (stored adapter, created)."""
        meta = adapter.metadata
        for _ in range(3):
            try:
                current = await self._store.get_adapter(meta.namespace, meta.name)
            except NotFoundError:
                if meta.resource_version is not None:
                    raise ConflictError(
                        f"loraadapter {adapter.key} does not exist, but resourceVersion "
                        f"{meta.resource_version!r} was given"
                    ) from None
                try:
                    return await self.create(adapter), True
                except ConflictError:
                    continue  # created concurrently: replace it instead
            stored = await self._store.replace_adapter(keep_finalizer(adapter, current))
            if current.model_key != stored.model_key:
                self._enqueue(current.model_key)  # its engines let the adapter go
            await self._changed(stored)
            return stored, False
        raise ConflictError(f"loraadapter {adapter.key} is being changed concurrently; retry")

    async def get(self, namespace: str, name: str) -> LoRAAdapter:
        """The stored LoRAAdapter, or NotFoundError."""
        return await self._store.get_adapter(namespace, name)

    async def list_namespace(self, namespace: str | None) -> list[LoRAAdapter]:
        """LoRAAdapters of one namespace (all namespaces when None)."""
        return await self._store.list_adapters(namespace)

    async def delete(self, namespace: str, name: str) -> None:
        """Delete the LoRAAdapter; NotFoundError if absent.

        While its finalizer holds it (it was loaded), the store only stamps the deletion:
        the adapter loop unloads it from every engine, then releases it.
        """
        adapter = await self._store.get_adapter(namespace, name)
        await self._store.delete_adapter(namespace, name)
        await self._events.publish(adapter, deleted=True)
        self._enqueue(adapter.model_key)

    async def observed(self, adapter: LoRAAdapter, deleted: bool) -> None:
        """A change an AdapterFeed saw: the event the admin API would have published, and
        a pass of the adapter loop (which writes the status)."""
        if not self._events.seen(adapter, deleted):
            await self._events.publish(adapter, deleted)
        self._enqueue(adapter.model_key)

    async def _changed(self, adapter: LoRAAdapter) -> None:
        await self._events.publish(adapter, deleted=False)
        self._enqueue(adapter.model_key)
