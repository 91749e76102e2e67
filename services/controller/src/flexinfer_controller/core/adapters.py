"""Admin operations on LoRAAdapters: store writes and change events.

The controller does not load adapters into engines yet (vLLM: ``POST /v1/load_lora_adapter``
on every replica of the base Model). Until it does, a stored adapter stays Pending with a
``Loaded=False`` condition that says so; the proxy routes its name to the base Model
regardless, which is enough for engines started with the adapter (``--lora-modules``).
"""

from __future__ import annotations

import logging

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


class AdapterService:
    """What the admin API does with LoRAAdapters; knows nothing of HTTP."""

    def __init__(self, store: ModelStore, bus: EventBus) -> None:
        self._store = store
        self._bus = bus

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

    async def _changed(self, adapter: LoRAAdapter) -> None:
        await self._publish(adapter, deleted=False)

    async def _publish(self, adapter: LoRAAdapter, *, deleted: bool) -> None:
        event = topics.AdapterChangedEvent(
            adapter=adapter.key,
            model=adapter.model_key,
            generation=0 if deleted else adapter.metadata.generation or 0,
            deleted=deleted,
        )
        try:
            await self._bus.publish(topics.ADAPTERS, event.model_dump(mode="json"))
        except BusError as exc:
            # The store is the source of truth and the proxies' periodic resync catches up.
            log.warning("could not publish %s change: %s", adapter.key, exc)
