"""``flexinfer.ai/lora-cleanup``: held from an adapter's first fetch or load until it is
unloaded from every engine, so that a delete waits for the engines to let it go."""

from __future__ import annotations

from flexinfer_common.api import LoRAAdapter
from flexinfer_common.api.lora import LORA_FINALIZER
from flexinfer_common.store import ModelStore
from flexinfer_controller.core.finalizer import add_finalizer, remove_finalizer


async def hold(store: ModelStore, adapter: LoRAAdapter) -> LoRAAdapter:
    """The adapter with the cleanup finalizer, written first when it lacks it."""
    return await add_finalizer(adapter, LORA_FINALIZER, store.replace_adapter)


async def release(store: ModelStore, adapter: LoRAAdapter) -> None:
    """Remove the cleanup finalizer; with no other finalizer left, the adapter is gone."""
    await remove_finalizer(adapter, LORA_FINALIZER, store.replace_adapter)


def keep_finalizer(adapter: LoRAAdapter, current: LoRAAdapter) -> LoRAAdapter:
    """A client's document keeps the controller's finalizer: it is not the client's to drop."""
    if LORA_FINALIZER in current.metadata.finalizers and (
        LORA_FINALIZER not in adapter.metadata.finalizers
    ):
        adapter = adapter.model_copy(deep=True)
        adapter.metadata.finalizers.append(LORA_FINALIZER)
    return adapter
