"""A LoRAAdapter's status from what its reconcile found: phase, counts and conditions.

Two conditions: ``Cached`` (the weights are where the engines read them) and ``Loaded``
(True once every ready replica of the base Model holds the adapter). Their reasons say
what the adapter waits for, or why it failed.
"""

from __future__ import annotations

from dataclasses import dataclass

from flexinfer_common.api import Condition, LoRAAdapter, LoRAAdapterPhase, LoRAAdapterStatus
from flexinfer_common.api.meta import set_condition
from flexinfer_controller.core.cache import CacheState, CacheStatus

LOADED = "Loaded"
CACHED = "Cached"

MODEL_NOT_FOUND = "ModelNotFound"
EXTERNAL_MODEL = "ExternalModel"
BACKEND_UNSUPPORTED = "BackendUnsupported"
LORA_DISABLED = "LoRADisabled"
NAME_CONFLICT = "AdapterNameConflict"
AWAITING_REPLICAS = "AwaitingReplicas"
AWAITING_REQUEST = "AwaitingRequest"
CACHING = "Caching"
LOAD_FAILED = "LoadFailed"
ENGINE_UNAVAILABLE = "EngineUnavailable"
UNLOADING = "Unloading"


@dataclass(frozen=True, slots=True)
class Verdict:
    """What one reconcile found for one adapter."""

    phase: LoRAAdapterPhase
    reason: str
    message: str
    loaded: int = 0
    """Ready replicas that hold it now."""
    total: int = 0
    """Ready replicas of the base Model."""
    cache: CacheState | None = None
    """Where its weights are (None: not looked at, the adapter cannot load anyway)."""


def loaded(total: int) -> Verdict:
    """On every one of ``total`` ready replicas."""
    where = "the ready replica" if total == 1 else f"all {total} ready replicas"
    return Verdict(LoRAAdapterPhase.LOADED, LOADED, f"loaded on {where}", total, total)


def build_status(adapter: LoRAAdapter, verdict: Verdict) -> LoRAAdapterStatus:
    """The status ``verdict`` describes; unchanged conditions keep their transition time."""
    generation = adapter.metadata.generation
    conditions = list(adapter.status.conditions)
    if verdict.cache is not None:
        ready = verdict.cache.status is CacheStatus.READY
        cached = Condition(
            type=CACHED,
            status="True" if ready else "False",
            reason=verdict.cache.reason,
            message=verdict.cache.message,
            observed_generation=generation,
        )
        conditions = set_condition(conditions, cached)
    is_loaded = verdict.phase is LoRAAdapterPhase.LOADED
    condition = Condition(
        type=LOADED,
        status="True" if is_loaded else "False",
        reason=verdict.reason,
        message=verdict.message,
        observed_generation=generation,
    )
    conditions = set_condition(conditions, condition)
    return LoRAAdapterStatus(
        phase=verdict.phase,
        conditions=conditions,
        loaded_replicas=verdict.loaded,
        total_replicas=verdict.total,
        message=verdict.message,
    )
