"""A ModelDeployment's Model and status: pure functions of what the apiserver holds.

The bridge (``deployment_bridge``) serves a v1alpha1 ModelDeployment by writing the Model
of the same namespace/name that ``to_model`` converts it to. Such a Model carries the
label ``MANAGED_LABEL`` and a controller ownerReference to its ModelDeployment; a Model
without the label is someone else's and is never written. The Model's status flows back
as the v1alpha1 phase (Pending, Running, Failed, Terminating) and conditions.
"""

from __future__ import annotations

from typing import Any

import pydantic

from flexinfer_common.api import API_VERSION_V1ALPHA1, DEPLOYMENT_KIND, to_model
from flexinfer_common.api.model import ModelSpec
from flexinfer_common.api.modeldeployment import ModelDeployment
from flexinfer_common.errors import InvalidSpecError
from flexinfer_controller.runtime.kubernetes.names import FLASH_NODES_ANNOTATION

Obj = dict[str, Any]
MANAGED_LABEL = "flexinfer.ai/managed-by"
MANAGED_VALUE = "modeldeployment"
"""``MANAGED_LABEL: MANAGED_VALUE`` marks a Model that the bridge writes."""
_LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
"""kubectl's record of the ModelDeployment: on the Model it would mislead a kubectl apply."""
_META = ("name", "namespace", "labels", "annotations", "uid", "generation", "resourceVersion",
         "creationTimestamp", "deletionTimestamp", "finalizers")  # fmt: skip
"""The ObjectMeta fields the API types carry (ownerReferences, managedFields stay behind)."""
CONTROLLER_ANNOTATIONS = (FLASH_NODES_ANNOTATION,)
"""What the controller itself records on a Model: the bridge keeps them as they are."""


def parse_deployment(found: Obj) -> ModelDeployment:
    """The ModelDeployment of a stored object; InvalidSpecError when it does not validate."""
    meta = {k: v for k, v in (found.get("metadata") or {}).items() if k in _META}
    body = {"metadata": meta, "spec": found.get("spec") or {}, "status": found.get("status") or {}}
    try:
        return ModelDeployment.model_validate(body)
    except pydantic.ValidationError as exc:
        raise InvalidSpecError(f"invalid ModelDeployment: {exc}") from exc


def desired_model(deployment: ModelDeployment, uid: str) -> Obj:
    """The Model body the bridge keeps for ``deployment`` (InvalidSpecError if none can be).

    Spec, labels and annotations are ``to_model``'s (its kept-fields annotation included);
    the ModelDeployment's finalizers, uid and status stay behind: the Model has its own.
    """
    model = to_model(deployment)
    meta = model.metadata
    annotations = {k: v for k, v in meta.annotations.items() if k != _LAST_APPLIED}
    return {
        "metadata": {
            "name": meta.name,
            "namespace": meta.namespace,
            "labels": {**meta.labels, MANAGED_LABEL: MANAGED_VALUE},
            "annotations": annotations,
            "ownerReferences": [owner_reference(deployment, uid)],
        },
        "spec": model.spec.model_dump(mode="json", by_alias=True, exclude_none=True),
    }


def keeping_controller_notes(desired: Obj, stored: Obj) -> Obj:
    """``desired`` with the stored Model's ``CONTROLLER_ANNOTATIONS`` (the bridge would
    otherwise erase them at its next write, and the controller write them back)."""
    notes = (stored.get("metadata") or {}).get("annotations") or {}
    kept = {k: notes[k] for k in CONTROLLER_ANNOTATIONS if k in notes}
    if not kept:
        return desired
    meta = desired["metadata"]
    return {**desired, "metadata": {**meta, "annotations": {**meta["annotations"], **kept}}}


def owner_reference(deployment: ModelDeployment, uid: str) -> Obj:
    """A controller reference to the ModelDeployment (no blockOwnerDeletion: the bridge's
    finalizer orders the deletion, and it would need ``modeldeployments/finalizers``)."""
    return {
        "apiVersion": API_VERSION_V1ALPHA1,
        "kind": DEPLOYMENT_KIND,
        "name": deployment.metadata.name,
        "uid": uid,
        "controller": True,
    }


def is_managed(model: Obj) -> bool:
    """Whether the bridge wrote this Model (and may write it again)."""
    labels = (model.get("metadata") or {}).get("labels") or {}
    return bool(labels.get(MANAGED_LABEL) == MANAGED_VALUE)


def model_differs(current: Obj, desired: Obj) -> bool:
    """Whether the stored Model's spec or bridged metadata is not ``desired``'s.

    Specs are compared as parsed ModelSpecs: the apiserver's defaults are the type's.
    """
    meta, want = current.get("metadata") or {}, desired["metadata"]
    empty: dict[str, list[Obj]] = {"ownerReferences": []}
    for field in ("labels", "annotations", "ownerReferences"):
        if (meta.get(field) or empty.get(field, {})) != want[field]:
            return True
    try:
        spec = ModelSpec.model_validate(current.get("spec") or {})
    except pydantic.ValidationError:
        return True
    return spec != ModelSpec.model_validate(desired["spec"])
