"""Admin operations on LoRAAdapters: store writes and change events.

The controller does not load adapters into engines yet (vLLM: ``POST /v1/load_lora_adapter``
on every replica of the base Model). Until it does, a stored adapter stays Pending with a
``Loaded=False`` condition that says so; the proxy routes its name to the base Model
regardless, which is enough for engines started with the adapter (``--lora-modules``).

On Kubernetes adapters are also applied with kubectl: an ``AdapterFeed`` (the apiserver's
informers) reports those changes, and ``AdapterService.observed`` gives them the status and
the bus event the admin API would have.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

from flexinfer_common.api import Condition, LoRAAdapter, LoRAAdapterPhase, LoRAAdapterStatus
from flexinfer_common.bus import EventBus, topics
from flexinfer_common.errors import BusError, ConflictError, NotFoundError
from flexinfer_common.store import ModelStore

log = logging.getLogger(__name__)

LOADED = "Loaded"
AWAITING_BACKEND = "AwaitingBackend"


def pending_status(adapter: LoRAAdapter) -> LoRAAdapterStatus:
    """The status of an adapter nothing has loaded yet: Pending, and why."""
    message = (
        f"adapter {adapter.spec.adapter_name!r} must be loaded by the backend of Model "
        f"{adapter.model_key}; the controller does not load LoRA adapters into engines yet"
    )
    condition = Condition(
        type=LOADED,
        status="False",
        reason=AWAITING_BACKEND,
        message=message,
        observed_generation=adapter.metadata.generation,
    )
    return LoRAAdapterStatus(
        phase=LoRAAdapterPhase.PENDING, conditions=[condition], message=message
    )


AdapterChanged = Callable[[LoRAAdapter, bool], Awaitable[None]]
"""Called with (adapter, deleted) for every change an AdapterFeed sees."""


class AdapterFeed(Protocol):
    """Reports LoRAAdapter changes made behind the admin API's back, until cancelled."""

    async def run(self, changed: AdapterChanged) -> None:
        """Await ``changed`` for every change; returns at once when there is nothing to watch."""


class NoAdapterFeed:
    """The SQL store's feed: only the admin API writes adapters, and it publishes itself."""

    async def run(self, changed: AdapterChanged) -> None:
        """Nothing to watch."""


def _status_current(adapter: LoRAAdapter) -> bool:
    generation = adapter.metadata.generation
    return any(c.observed_generation == generation for c in adapter.status.conditions)


class AdapterService:
    """What the admin API does with LoRAAdapters; knows nothing of HTTP."""

    def __init__(self, store: ModelStore, bus: EventBus) -> None:
        self._store = store
        self._bus = bus
        # Last generation published per key (0: deleted), so an informer's echo of the
        # admin API's own write, or of the status write below, is not published twice.
        self._published: dict[str, int] = {}

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
                await self._store.get_adapter(meta.namespace, meta.name)
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
            stored = await self._store.replace_adapter(adapter)
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
        """Delete the LoRAAdapter; NotFoundError if absent."""
        adapter = await self._store.get_adapter(namespace, name)
        await self._store.delete_adapter(namespace, name)
        await self._publish(adapter, deleted=True)

    async def observed(self, adapter: LoRAAdapter, deleted: bool) -> None:
        """A change an AdapterFeed saw: status of the current generation, then the event."""
        if deleted:
            if self._published.pop(adapter.key, None) != 0:
                await self._publish(adapter, deleted=True)
            return
        if not _status_current(adapter):
            meta = adapter.metadata
            try:
                adapter = await self._store.update_adapter_status(
                    meta.namespace, meta.name, pending_status(adapter), meta.resource_version
                )
            except (ConflictError, NotFoundError):
                return  # changed or deleted since: the feed reports that version next
        if self._published.get(adapter.key) != (adapter.metadata.generation or 0):
            await self._changed(adapter)

    async def _changed(self, adapter: LoRAAdapter) -> None:
        await self._publish(adapter, deleted=False)

    async def _publish(self, adapter: LoRAAdapter, *, deleted: bool) -> None:
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
