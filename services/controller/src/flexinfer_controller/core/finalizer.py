"""The reconcile's first step: the cleanup finalizer, added before anything is created.

With ``flexinfer.ai/model-cleanup`` on the Model, a delete only stamps
``deletionTimestamp`` (on the SQL store as on the API server); the reconcile then tears
down what the runtime runs for it and removes the finalizer, which completes the delete.
A controller that crashes half-way finds the stamp again on restart and finishes the job.
"""

from __future__ import annotations

from flexinfer_common.api import Model
from flexinfer_common.store import ModelStore

MODEL_FINALIZER = "flexinfer.ai/model-cleanup"


async def ensure_finalizer(store: ModelStore, model: Model) -> Model:
    """The Model with the cleanup finalizer, written first when it lacks it."""
    if MODEL_FINALIZER in model.metadata.finalizers:
        return model
    held = model.model_copy(deep=True)
    held.metadata.finalizers = [*model.metadata.finalizers, MODEL_FINALIZER]
    # Conditional on resourceVersion: a concurrent edit makes this a ConflictError and the
    # reconcile starts over from a fresh read.
    return await store.replace_model(held)


async def release_finalizer(store: ModelStore, model: Model) -> None:
    """Remove the cleanup finalizer; with no other finalizer left, the Model is gone."""
    if MODEL_FINALIZER not in model.metadata.finalizers:
        return
    released = model.model_copy(deep=True)
    released.metadata.finalizers = [f for f in model.metadata.finalizers if f != MODEL_FINALIZER]
    await store.replace_model(released)
