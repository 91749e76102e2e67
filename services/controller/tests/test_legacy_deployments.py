"""The Model the bridge keeps for a ModelDeployment, and when a stored one differs from it."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from flexinfer_common.api import DEPLOYMENT_FINALIZER, V1ALPHA1_ANNOTATION, to_model
from flexinfer_common.errors import InvalidSpecError
from flexinfer_controller.legacy.deployments import (
    MANAGED_LABEL,
    desired_model,
    is_managed,
    model_differs,
    parse_deployment,
)

UID = "0b6f3c1e-0000-4000-8000-000000000001"


def stored(**spec: Any) -> dict[str, Any]:
    """A ModelDeployment as the apiserver returns it."""
    return {
        "apiVersion": "ai.flexinfer/v1alpha1",
        "kind": "ModelDeployment",
        "metadata": {
            "name": "chat", "namespace": "team", "uid": UID, "generation": 2,
            "resourceVersion": "41", "finalizers": [DEPLOYMENT_FINALIZER],
            "labels": {"app": "chat"}, "managedFields": [{"manager": "kubectl"}],
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}", "team": "a"},
        },
        "spec": {"backend": "vllm", "model": "org/chat", **spec},
    }  # fmt: skip


def test_the_model_is_to_models_with_the_bridges_metadata() -> None:
    found = stored(modelCacheRef="shared-cache", replicas=2)
    deployment = parse_deployment(found)
    body = desired_model(deployment, UID)
    converted = to_model(deployment)
    assert body["spec"] == converted.spec.model_dump(mode="json", by_alias=True, exclude_none=True)
    meta = body["metadata"]
    assert meta["labels"] == {"app": "chat", MANAGED_LABEL: "modeldeployment"}
    assert set(meta) == {"name", "namespace", "labels", "annotations", "ownerReferences"}
    assert meta["annotations"]["team"] == "a"
    assert "kubectl.kubernetes.io/last-applied-configuration" not in meta["annotations"]
    # modelCacheRef is not resolved: the conversion keeps it in its annotation.
    kept = json.loads(meta["annotations"][V1ALPHA1_ANNOTATION])
    assert kept["spec"]["modelCacheRef"] == "shared-cache"
    assert meta["ownerReferences"][0]["uid"] == UID
    assert is_managed(body)


def test_an_unparsable_deployment_is_an_invalid_spec() -> None:
    with pytest.raises(InvalidSpecError, match="control characters"):
        parse_deployment(stored(model="org/\u0007"))


def test_a_stored_model_differs_only_in_what_the_bridge_writes() -> None:
    body = desired_model(parse_deployment(stored()), UID)
    current = copy.deepcopy(body)
    current["metadata"] |= {"finalizers": ["flexinfer.ai/model-cleanup"], "generation": 3}
    current["status"] = {"phase": "Ready"}
    current["spec"]["serverless"]["idleTimeout"] = "5m0s"  # as the apiserver may print it
    assert not model_differs(current, body)

    for field, value in (("labels", {}), ("annotations", {"x": "y"}), ("ownerReferences", [])):
        changed = copy.deepcopy(current)
        changed["metadata"][field] = value
        assert model_differs(changed, body), field
    changed = copy.deepcopy(current)
    changed["spec"]["source"] = "hf://org/other"
    assert model_differs(changed, body)
    assert not is_managed({"metadata": {"labels": {MANAGED_LABEL: "someone-else"}}})
