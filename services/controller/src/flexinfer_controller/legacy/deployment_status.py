"""A ModelDeployment's status: its Model's, in v1alpha1 terms, or why there is no Model.

Phases are v1alpha1's (Pending, Running, Failed, Terminating). The Model's conditions are
copied (Ready, Cached, Loaded...), and a ``Ready`` condition is always there, with a
v1alpha1 reason where the bridge itself decides it (ValidationFailed, Reconciling,
DeploymentReady) and ``ModelNotManaged`` when a Model of that name belongs to someone else.
"""

from __future__ import annotations

from typing import Any

import pydantic

from flexinfer_common.api.conversion_fields import status_to_v1
from flexinfer_common.api.meta import Condition, ConditionStatus, set_condition
from flexinfer_common.api.modeldeployment import DeploymentPhase, ModelDeploymentStatus
from flexinfer_common.api.status import ModelStatus

Obj = dict[str, Any]
READY = "Ready"
# v1alpha1 condition reasons (shared/reference/flexinfer-api.md §3.1), and ours.
VALIDATION_FAILED = "ValidationFailed"
MODEL_NOT_MANAGED = "ModelNotManaged"
RECONCILING = "Reconciling"
DEPLOYMENT_READY = "DeploymentReady"
TERMINATING = "Terminating"


def _ready(status: ConditionStatus, reason: str, message: str, generation: int | None) -> Condition:
    return Condition(
        type=READY, status=status, reason=reason, message=message, observed_generation=generation
    )


def _merged(previous: ModelDeploymentStatus, new: ModelDeploymentStatus) -> ModelDeploymentStatus:
    """``new`` with the previous transition times of conditions whose status held."""
    conditions = list(previous.conditions)
    for condition in new.conditions:
        conditions = set_condition(conditions, condition)
    kept = {c.type for c in new.conditions}
    return new.model_copy(update={"conditions": [c for c in conditions if c.type in kept]})


def stored(found: Obj) -> ModelDeploymentStatus:
    """The status a stored ModelDeployment holds (empty when it does not parse)."""
    try:
        return ModelDeploymentStatus.model_validate(found.get("status") or {})
    except pydantic.ValidationError:
        return ModelDeploymentStatus()


def failed(
    previous: ModelDeploymentStatus, generation: int | None, reason: str, message: str
) -> ModelDeploymentStatus:
    """Failed, with a Ready=False condition saying why (the spec is invalid, the name taken)."""
    new = ModelDeploymentStatus(
        phase=DeploymentPhase.FAILED,
        conditions=[_ready("False", reason, message, generation)],
    )
    return _merged(previous, new)


def terminating(previous: ModelDeploymentStatus, generation: int | None) -> ModelDeploymentStatus:
    """Terminating: the Model is being deleted; the rest of the status is kept."""
    message = "deleting the Model before the ModelDeployment"
    ready = _ready("False", TERMINATING, message, generation)
    status = previous.model_copy(update={"phase": DeploymentPhase.TERMINATING})
    return status.model_copy(update={"conditions": set_condition(status.conditions, ready)})


def mirrored(
    previous: ModelDeploymentStatus, generation: int | None, model: Obj
) -> ModelDeploymentStatus:
    """The Model's status as the ModelDeployment's.

    The conditions claim the ModelDeployment's ``generation`` only when the Model's status
    observed the Model's current spec (the caller wrote that spec from this generation).
    """
    if not status_current(model):
        generation = None
    status = ModelDeploymentStatus.model_validate(
        status_to_v1(ModelStatus.model_validate(model.get("status") or {}))
    )
    conditions = [
        c.model_copy(update={"observed_generation": generation}) for c in status.conditions
    ]
    if not any(c.type == READY for c in conditions):  # the Model wrote none (yet)
        conditions.append(_ready_of_phase(status.phase, model, generation))
    return _merged(previous, status.model_copy(update={"conditions": conditions}))


def _ready_of_phase(phase: DeploymentPhase, model: Obj, generation: int | None) -> Condition:
    if phase is DeploymentPhase.RUNNING:
        return _ready("True", DEPLOYMENT_READY, "the Model is Ready", generation)
    model_phase = (model.get("status") or {}).get("phase") or "Pending"
    return _ready("False", RECONCILING, f"the Model is {model_phase}", generation)


def status_current(model: Obj) -> bool:
    """Whether the Model's status observed its latest spec (generation)."""
    observed = (model.get("status") or {}).get("observedGeneration")
    return observed is not None and observed == (model.get("metadata") or {}).get("generation")
