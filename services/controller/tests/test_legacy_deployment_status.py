"""A ModelDeployment's status from its Model's: v1alpha1 phases, conditions, generations."""

from __future__ import annotations

from typing import Any

from flexinfer_common.api.modeldeployment import DeploymentPhase, ModelDeploymentStatus
from flexinfer_controller.legacy import deployment_status as statuses


def model(phase: str, observed: int | None = 4, **status: Any) -> dict[str, Any]:
    """A stored Model at generation 4."""
    return {"metadata": {"generation": 4},
            "status": {"phase": phase, "observedGeneration": observed, **status}}  # fmt: skip


def ready(status: ModelDeploymentStatus) -> Any:
    """The Ready condition."""
    return next(c for c in status.conditions if c.type == "Ready")


def test_phases_map_to_v1alpha1() -> None:
    empty = ModelDeploymentStatus()
    expected = {"Ready": DeploymentPhase.RUNNING, "Failed": DeploymentPhase.FAILED,
                "Loading": DeploymentPhase.PENDING, "Idle": DeploymentPhase.PENDING}  # fmt: skip
    for phase, v1 in expected.items():
        status = statuses.mirrored(empty, 2, model(phase))
        assert status.phase is v1, phase
        condition = ready(status)  # the Model wrote none: the bridge's own Ready
        assert condition.status == ("True" if phase == "Ready" else "False")
        assert condition.reason == ("DeploymentReady" if phase == "Ready" else "Reconciling")
        assert condition.observed_generation == 2


def test_the_models_conditions_claim_the_generation_only_when_current() -> None:
    cached = {"type": "Cached", "status": "True", "reason": "Cached",
              "lastTransitionTime": "2025-01-01T00:00:00Z", "observedGeneration": 4}  # fmt: skip
    current = statuses.mirrored(ModelDeploymentStatus(), 2, model("Loading", conditions=[cached]))
    assert [(c.type, c.observed_generation) for c in current.conditions] == [
        ("Cached", 2),
        ("Ready", 2),
    ]
    stale = statuses.mirrored(ModelDeploymentStatus(), 2, model("Loading", observed=3))
    assert ready(stale).observed_generation is None


def test_transition_times_hold_while_a_condition_holds() -> None:
    first = statuses.failed(ModelDeploymentStatus(), 1, "ValidationFailed", "bad model")
    again = statuses.failed(first, 2, "ValidationFailed", "still bad")
    assert ready(again).last_transition_time == ready(first).last_transition_time
    assert (ready(again).message, ready(again).observed_generation) == ("still bad", 2)
    ending = statuses.terminating(again, 2)
    assert ending.phase is DeploymentPhase.TERMINATING
    assert (ready(ending).status, ready(ending).reason) == ("False", "Terminating")
