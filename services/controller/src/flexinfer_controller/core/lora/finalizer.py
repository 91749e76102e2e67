"""``flexinfer.ai/lora-cleanup``: held from an adapter's first fetch or load until it is
unloaded from every engine, so that a delete waits for the engines to let it go."""

from __future__ import annotations

from flexinfer_common.api import LoRAAdapter
from flexinfer_common.api.lora import LORA_FINALIZER
from flexinfer_common.store import ModelStore


async def hold(store: ModelStore, adapter: LoRAAdapter) -> LoRAAdapter:
    """The adapter with the cleanup finalizer, written first when it lacks it."""
    if LORA_FINALIZER in adapter.metadata.finalizers:
        return adapter
    held = adapter.model_copy(deep=True)
    held.metadata.finalizers = [*adapter.metadata.finalizers, LORA_FINALIZER]
    # Conditional on resourceVersion: a concurrent edit is a ConflictError, and the
    # reconcile starts over from a fresh read.
    return await store.replace_adapter(held)


async def release(store: ModelStore, adapter: LoRAAdapter) -> None:
    """Remove the cleanup finalizer; with no other finalizer left, the adapter is gone."""
    if LORA_FINALIZER not in adapter.metadata.finalizers:
        return
    released = adapter.model_copy(deep=True)
    released.metadata.finalizers = [f for f in adapter.metadata.finalizers if f != LORA_FINALIZER]
    await store.replace_adapter(released)


def keep_finalizer(adapter: LoRAAdapter, current: LoRAAdapter) -> LoRAAdapter:
    """A client's document keeps the controller's finalizer: it is not the client's to drop."""
    if LORA_FINALIZER in current.metadata.finalizers and (
        LORA_FINALIZER not in adapter.metadata.finalizers
    ):
        adapter = adapter.model_copy(deep=True)
        adapter.metadata.finalizers.append(LORA_FINALIZER)
    return adapter
