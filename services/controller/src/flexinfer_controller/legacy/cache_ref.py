"""A ModelDeployment's ``spec.modelCacheRef``: what its Model reads, or why it must wait.

The ModelCache loop owns the cache's status; the bridge owns the Model's spec. So the
bridge, not the Model reconcile, turns a cache's status into the Model it writes:

* Ready (its Ready condition observed the current generation) with a ``path``: the
  Model's ``spec.source`` is that path (``pvc://<claim>/...`` or ``file://<hostPath>/...``),
  so the engine mounts the cache's volume and nothing is fetched again;
* Ready without a path (``Ephemeral``: nothing is cached ahead): the Model keeps its own
  source, as without a reference;
* absent, not Ready, or Failed: the Model carries a ``SourceHold`` naming the cache and its
  phase; the Model reconcile starts nothing while it is there. Failed also fails the
  ModelDeployment with the cache's message.

Pure: the caller reads the cache (from its informer) and writes the result.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from flexinfer_controller.core.sources import SOURCE_HOLD_ANNOTATION, SourceHold

Obj = dict[str, Any]
MODEL_CACHE_NOT_FOUND = "ModelCacheNotFound"
MODEL_CACHE_NOT_READY = "ModelCacheNotReady"
MODEL_CACHE_FAILED = "ModelCacheFailed"


@dataclass(frozen=True)
class CacheBinding:
    """What a ModelCache makes of the bridged Model: its source, or a hold."""

    source: str | None = None
    """The cache's status.path once Ready (None: the Model's own source)."""
    hold: SourceHold | None = None
    """Why the Model may not start yet (None: it may)."""


NO_CACHE = CacheBinding()


def _ready_condition(found: Obj) -> Obj:
    conditions = (found.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == "Ready"), {})


def binding(namespace: str, ref: str, found: Obj | None) -> CacheBinding:
    """What the ModelCache ``namespace/ref`` (``found``, None when absent) gives the Model."""
    name = f"ModelCache {namespace}/{ref}"
    if found is None:
        message = f"{name} does not exist; the Model starts once it is created and Ready"
        return CacheBinding(hold=SourceHold(MODEL_CACHE_NOT_FOUND, message))
    status = found.get("status") or {}
    phase = str(status.get("phase") or "Pending")
    condition = _ready_condition(found)
    why = str(condition.get("message") or condition.get("reason") or "no status yet")
    if phase == "Failed":
        return CacheBinding(hold=SourceHold(MODEL_CACHE_FAILED, f"{name} failed: {why}", True))
    generation = (found.get("metadata") or {}).get("generation")
    if phase == "Ready" and condition.get("observedGeneration") != generation:
        # A new spec the cache loop has not looked at: the path may be the old spec's.
        message = f"{name}'s spec changed (generation {generation}) and is being reconciled"
        return CacheBinding(hold=SourceHold(MODEL_CACHE_NOT_READY, message))
    if phase != "Ready":
        message = f"{name} is {phase}: {why}; the Model starts once it is Ready"
        return CacheBinding(hold=SourceHold(MODEL_CACHE_NOT_READY, message))
    path = status.get("path")
    return CacheBinding(source=str(path)) if path else NO_CACHE


def apply_binding(desired: Obj, cache: CacheBinding) -> Obj:
    """``desired`` (a Model body) reading the cache's path, or held."""
    spec = dict(desired["spec"])
    if cache.source is not None:
        spec["source"] = cache.source
    annotations = dict(desired["metadata"]["annotations"])
    if cache.hold is not None:
        annotations[SOURCE_HOLD_ANNOTATION] = cache.hold.dump()
    metadata = {**desired["metadata"], "annotations": annotations}
    return {**desired, "metadata": metadata, "spec": spec}
