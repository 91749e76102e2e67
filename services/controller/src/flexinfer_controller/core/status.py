"""Build a Model's status from what the reconciler decided and observed."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

from flexinfer_common.api import Condition, Model, ModelPhase, ModelStatus
from flexinfer_common.api.meta import ConditionStatus, set_condition
from flexinfer_common.api.status import (
    CacheStatus,
    ConditionType,
    GPUStatus,
    Residency,
    SharedGroupStatus,
)
from flexinfer_controller.core.sharing import Hold, SharedVerdict
from flexinfer_controller.runtime import Replica, ReplicaState


@dataclass(frozen=True, slots=True)
class Verdict:
    """The reconciler's findings for one model, before status is written."""

    config_valid: tuple[bool, str, str] = (True, "ConfigValid", "")
    """(ok, reason, message) of spec validation (backend known, source well-formed)."""
    schedulable: tuple[bool, str, str] = (True, "Schedulable", "")
    """(ok, reason, message): can this runtime run the backend."""
    cached: tuple[bool, str, str] | None = None
    """(ok, reason, message) of source resolution; None when not evaluated."""
    cache_failed: bool = False
    """The cache can never fetch the source as written (not found, denied): Failed."""
    cache: CacheStatus | None = None
    """status.cache of a remote source (None: left as it is)."""
    crash_loop: str | None = None
    """A message when the model is in a crash loop."""
    waiting: str | None = None
    """A message when a restart is delayed by crash backoff."""
    placement_pending: bool = False
    """Not schedulable *yet* (no fitting node now): Pending, not Failed."""
    gpu: GPUStatus | None = None
    """Where detectGPU placed the model; None when it was not placed."""
    shared: SharedVerdict | None = None
    """Why the shared-GPU hook runs fewer replicas than desired (Preempted, queued)."""
    shared_group: SharedGroupStatus | None = None
    """status.sharedGroup of a member of a shared group, as the hook answered."""


def phase_of(verdict: Verdict, desired: int, running: int, ready: int) -> ModelPhase:
    """Failed > Pending (no fitting node yet, or the source) > the shared-GPU hook's
    Preempted or Pending > Ready > Idle > Loading, as the seed's status flow."""
    unschedulable = not verdict.schedulable[0]
    if not verdict.config_valid[0] or verdict.crash_loop:
        return ModelPhase.FAILED
    if (unschedulable and not verdict.placement_pending) or verdict.cache_failed:
        return ModelPhase.FAILED
    if verdict.shared is not None:  # also when unplaced: its group holds the GPU
        preempted = verdict.shared.hold is Hold.PREEMPTED
        return ModelPhase.PREEMPTED if preempted else ModelPhase.PENDING
    if unschedulable or (verdict.cached is not None and not verdict.cached[0]):
        return ModelPhase.PENDING
    if ready > 0:
        return ModelPhase.READY
    if desired == 0 and running == 0:
        return ModelPhase.IDLE
    return ModelPhase.LOADING


def build_status(
    model: Model,
    verdict: Verdict,
    *,
    desired: int,
    replicas: list[Replica],
    last_active: datetime | None,
    sleeping: bool = False,
) -> ModelStatus:
    """The new status; conditions keep their transition time when their status is unchanged
    (``sleeping``: a replica of the Model sleeps, see core/sleep.py)."""
    ready = [r for r in replicas if r.state is ReplicaState.READY]
    phase = phase_of(verdict, desired, len(replicas), len(ready))
    gen = model.metadata.generation
    loaded = _loaded(verdict, phase, desired)
    checks: list[tuple[ConditionType, tuple[bool | None, str, str]]] = [
        (ConditionType.CONFIG_VALID, verdict.config_valid),
        (ConditionType.SCHEDULABLE, verdict.schedulable),
        (ConditionType.CACHED, verdict.cached or (None, "Unknown", "")),
        (ConditionType.LOADED, loaded),
        (ConditionType.READY, loaded),
    ]
    conditions = _cleared(model.status.conditions)
    for kind, (ok, reason, message) in checks:
        value: ConditionStatus = "Unknown" if ok is None else ("True" if ok else "False")
        cond = Condition(
            type=kind.value, status=value, reason=reason, message=message, observed_generation=gen
        )
        conditions = set_condition(conditions, cond)
    summary = next((m for _, (ok, _, m) in checks if ok is False and m), None)
    if verdict.shared is not None and phase is not ModelPhase.FAILED:
        summary = verdict.shared.message  # the hold says why, over the unplaced GPU
    return model.status.model_copy(
        update={
            "phase": phase,
            "conditions": conditions,
            "replicas": len(replicas),
            "ready_replicas": len(ready),
            "desired_replicas": desired,
            "observed_generation": gen,
            "endpoint": ready[0].url if ready else None,
            "residency": _residency(replicas, sleeping),
            "gpu": verdict.gpu,
            "shared_group": verdict.shared_group,
            "last_active_time": last_active,
            "message": summary,
            "cache": verdict.cache if verdict.cache is not None else model.status.cache,
        }
    )


def _residency(replicas: list[Replica], sleeping: bool) -> Residency:
    if replicas:
        return Residency.RESIDENT
    return Residency.SLEEPING if sleeping else Residency.STOPPED


def _loaded(verdict: Verdict, phase: ModelPhase, desired: int) -> tuple[bool | None, str, str]:
    if verdict.crash_loop:
        return False, "CrashLoopBackOff", verdict.crash_loop
    if verdict.shared is not None and phase is not ModelPhase.FAILED:
        return False, verdict.shared.reason, verdict.shared.message
    if phase is ModelPhase.READY:
        return True, "BackendReady", "at least one replica serves"
    if phase in (ModelPhase.FAILED, ModelPhase.PENDING):
        return False, "NotStarted", "the model cannot start yet"
    if desired == 0:
        return False, "WaitingForActivation", "scaled to zero; the next request activates it"
    return False, "StartingBackend", verdict.waiting or "engine is starting"


EXTERNAL_REASON = "ExternalEndpoints"
"""Condition reason of a Model served by spec.endpoints rather than by our runtime."""


def build_external_status(model: Model, *, last_active: datetime | None) -> ModelStatus:
    """Ready with every condition explaining that spec.endpoints serve it, nothing runs here."""
    urls = list(model.spec.endpoints or [])
    gen = model.metadata.generation
    message = (
        f"served by {len(urls)} external endpoint(s) from spec.endpoints; "
        "no engine is started for it"
    )
    checks: list[tuple[ConditionType, ConditionStatus, str]] = [
        (ConditionType.CONFIG_VALID, "True", "endpoints are http(s) base URLs"),
        (ConditionType.SCHEDULABLE, "True", message),
        (ConditionType.CACHED, "Unknown", "weights are the external servers' concern"),
        (ConditionType.LOADED, "True", message),
        (ConditionType.READY, "True", message),
    ]
    conditions = _cleared(model.status.conditions)
    for kind, value, text in checks:
        cond = Condition(
            type=kind.value,
            status=value,
            reason=EXTERNAL_REASON,
            message=text,
            observed_generation=gen,
        )
        conditions = set_condition(conditions, cond)
    return model.status.model_copy(
        update={
            "phase": ModelPhase.READY,
            "conditions": conditions,
            "replicas": len(urls),
            "ready_replicas": len(urls),
            "desired_replicas": len(urls),
            "observed_generation": gen,
            "endpoint": urls[0],
            "last_active_time": last_active,
            "message": None,
        }
    )


def failed_status(model: Model, reason: str, message: str) -> ModelStatus:
    """Failed at this generation by an error no retry fixes; Reconciled=False tells it."""
    message = message[:_MAX_MESSAGE]
    return model.status.model_copy(
        update={
            "phase": ModelPhase.FAILED,
            "conditions": _failure(model, reason, message),
            "observed_generation": model.metadata.generation,
            "message": message,
        }
    )


def retrying_status(model: Model, reason: str, message: str) -> ModelStatus:
    """The status as it is, with Reconciled=False saying what failed and when it is retried.

    The phase and observedGeneration stay: nothing of the spec was converged, and what runs
    keeps serving meanwhile.
    """
    conditions = _failure(model, reason, message[:_MAX_MESSAGE])
    return model.status.model_copy(update={"conditions": conditions})


def _failure(model: Model, reason: str, message: str) -> list[Condition]:
    cond = Condition(
        type=ConditionType.RECONCILED.value,
        status="False",
        reason=reason,
        message=message,
        observed_generation=model.metadata.generation,
    )
    return set_condition(list(model.status.conditions), cond)


def _cleared(conditions: list[Condition]) -> list[Condition]:
    """``conditions`` without Reconciled: a reconcile that got this far did not fail."""
    return [c for c in conditions if c.type != ConditionType.RECONCILED.value]


_MAX_MESSAGE = 2000
"""An apiserver's refusal can list every invalid field; status keeps the start of it."""

_BLOCKED = frozenset({ModelPhase.FAILED, ModelPhase.PENDING})
"""Phases in which the model waits on something a person may have to fix."""


def phase_change(key: str, old: ModelStatus, new: ModelStatus) -> tuple[int, str] | None:
    """The log level and line for a status change worth telling (None: nothing to tell).

    A phase change is told once, with its reason; so is a new reason for a model that
    stays Failed or Pending (another wrong source, say). Anything else, the replica
    counts or timestamps that every reconcile refreshes, is not.
    """
    phase_changed = old.phase is not new.phase or old.observed_generation is None
    if not phase_changed and not (new.phase in _BLOCKED and new.message != old.message):
        return None
    before = old.phase.value if old.observed_generation is not None else "new"
    if new.phase in _BLOCKED and new.message:
        level = logging.WARNING if new.phase is ModelPhase.FAILED else logging.INFO
        return level, f"{key}: {before} → {new.phase.value}: {new.message}"
    return logging.INFO, f"{key}: {before} → {new.phase.value} ({_why(new)})"


def _why(status: ModelStatus) -> str:
    if status.phase is ModelPhase.READY:
        return f"{status.ready_replicas} of {status.desired_replicas} replicas ready"
    loaded = next((c for c in status.conditions if c.type == ConditionType.LOADED.value), None)
    return (loaded.message if loaded is not None and loaded.message else None) or "no reason given"
