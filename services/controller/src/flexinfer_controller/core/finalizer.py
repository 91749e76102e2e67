"""The reconcile's first step: the cleanup finalizer, added before anything is created.

With ``flexinfer.ai/model-cleanup`` on the Model, a delete only stamps
``deletionTimestamp`` (on the SQL store as on the API server); the reconcile then tears
down what the runtime runs for it and removes the finalizer, which completes the delete.
A controller that crashes half-way finds the stamp again on restart and finishes the job.
``add_finalizer`` and ``remove_finalizer`` do the same for any stored kind (LoRAAdapters).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol, Self, TypeVar

from flexinfer_common.api import Model
from flexinfer_common.api.meta import ObjectMeta
from flexinfer_common.store import ModelStore

MODEL_FINALIZER = "flexinfer.ai/model-cleanup"


class _Stored(Protocol):
    metadata: ObjectMeta

    def model_copy(self, *, deep: bool = ...) -> Self:
        """A copy (the pydantic method)."""
        ...


T = TypeVar("T", bound=_Stored)


async def add_finalizer(obj: T, name: str, replace: Callable[[T], Awaitable[T]]) -> T:
    """``obj`` with finalizer ``name``, written through ``replace`` first when it lacks it."""
    if name in obj.metadata.finalizers:
        return obj
    held = obj.model_copy(deep=True)
    held.metadata.finalizers = [*obj.metadata.finalizers, name]
    # Conditional on resourceVersion: a concurrent edit makes this a ConflictError and the
    # reconcile starts over from a fresh read.
    return await replace(held)


async def remove_finalizer(obj: T, name: str, replace: Callable[[T], Awaitable[object]]) -> None:
    """Remove finalizer ``name``; with no other finalizer left, the object is gone."""
    if name not in obj.metadata.finalizers:
        return
    released = obj.model_copy(deep=True)
    released.metadata.finalizers = [f for f in obj.metadata.finalizers if f != name]
    await replace(released)


async def ensure_finalizer(store: ModelStore, model: Model) -> Model:
    """The Model with the cleanup finalizer, written first when it lacks it."""
    return await add_finalizer(model, MODEL_FINALIZER, store.replace_model)


async def release_finalizer(store: ModelStore, model: Model) -> None:
    """Remove the cleanup finalizer; with no other finalizer left, the Model is gone."""
    await remove_finalizer(model, MODEL_FINALIZER, store.replace_model)
