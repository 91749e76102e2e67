"""core.rollout: which spec changes give replicas a new rendering (and so replace them)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from flexinfer_common.api import Model
from flexinfer_controller.backends import LaunchSpec
from flexinfer_controller.core.gpu import GPUAssignment
from flexinfer_controller.core.rollout import template_hash
from flexinfer_controller.testing import model_doc

LAUNCH = LaunchSpec(argv=("engine", "--model", "/m"), served_name="tiny", env={"A": "1"})


def _model(**serverless: Any) -> Model:
    doc = model_doc("tiny", "file:///m", **serverless)
    doc["metadata"]["namespace"] = "default"
    return Model.model_validate(doc)


def test_serverless_changes_keep_the_rendering() -> None:
    base = template_hash(_model(minReplicas=1), LAUNCH)
    assert template_hash(_model(minReplicas=3, maxReplicas=4), LAUNCH) == base
    assert template_hash(_model(idle_timeout="1h", scaleToZero=False), LAUNCH) == base


def test_what_differs_per_replica_keeps_the_rendering() -> None:
    model = _model()
    pinned = replace(
        LAUNCH,
        gpus=GPUAssignment(node="n", vendor="nvidia", devices=(0,)),
        trace_parent="00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        template_hash="anything",
        for_port=lambda port: LAUNCH,
    )
    assert template_hash(model, pinned) == template_hash(model, LAUNCH)


def test_a_change_of_the_engine_or_the_rest_of_the_spec_is_a_new_rendering() -> None:
    model = _model()
    base = template_hash(model, LAUNCH)
    assert template_hash(model, replace(LAUNCH, argv=(*LAUNCH.argv, "--seed", "1"))) != base
    assert template_hash(model, replace(LAUNCH, env={"A": "2"})) != base
    assert template_hash(model, replace(LAUNCH, gpu_vendor="nvidia")) != base
    # The pre-start step reads the spec, not the launch: a spec change outside serverless
    # replaces the replicas even when the launch renders the same.
    quantized = model.model_copy(
        update={"spec": model.spec.model_copy(update={"quantize": {"method": "int8"}})}
    )
    assert template_hash(quantized, LAUNCH) != base
