"""What the kubernetes runtime does with rendered objects: the API calls, decided purely.

For each rendered object: read it; create it when absent; update it (the selective merge)
when an owned field differs and its kind may be updated; on deletion, delete what the
garbage collector would otherwise leave running until the Model is gone. PVCs are never
updated nor deleted here (their owner reference lets the collector remove them with the
Model), Jobs are never updated (their pod template is immutable: a new spec gets a new
name).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

from flexinfer_controller.runtime.kubernetes.merge import merge, needs_update
from flexinfer_controller.runtime.kubernetes.names import Obj

RESOURCES = {
    "Service": ("", "services"),
    "ConfigMap": ("", "configmaps"),
    "PersistentVolumeClaim": ("", "persistentvolumeclaims"),
    "Deployment": ("apps", "deployments"),
    "Job": ("batch", "jobs"),
    "PodDisruptionBudget": ("policy", "poddisruptionbudgets"),
}
"""Kind -> (API group, resource) of every object the renderers make."""
UPDATED = frozenset({"Service", "ConfigMap", "Deployment", "PodDisruptionBudget"})
DELETED_ON_CLEANUP = frozenset({"Service", "ConfigMap", "Deployment", "PodDisruptionBudget", "Job"})


@dataclass(frozen=True)
class Op:
    """One API call on one object."""

    verb: str
    group: str
    resource: str
    namespace: str
    name: str
    body: Obj | None = None
    fields: tuple[str, ...] = ()
    """For an update: the owned fields that differed."""


def _op(verb: str, obj: Obj, body: Obj | None = None, fields: tuple[str, ...] = ()) -> Op:
    group, resource = RESOURCES[str(obj["kind"])]
    meta = obj["metadata"]
    return Op(verb, group, resource, meta["namespace"], meta["name"], body, fields)


def read(desired: Obj) -> Op:
    """The GET that fetches the live object."""
    return _op("get", desired)


def ensure(desired: Obj, live: Obj | None) -> Op | None:
    """create, update (merged onto ``live``) or nothing."""
    if live is None:
        return _op("create", desired, desired)
    if str(desired["kind"]) not in UPDATED:
        return None
    changed = needs_update(desired, live)
    return _op("update", desired, merge(desired, live), tuple(changed)) if changed else None


def standby(desired: Obj, live: Obj | None) -> Op | None:
    """ensureDeployment between starts: create it with 0 replicas, merge onto it what no pod
    is made from, and its pod template only while it runs none.

    spec.replicas is written as it is live: start and stop own it, so two writers never
    fight over it. A new template on a Deployment that runs replicas would roll its pods,
    which is start's decision (and is left to it).
    """
    body = copy.deepcopy(desired)
    running = int(((live or {}).get("spec") or {}).get("replicas") or 0)
    body["spec"]["replicas"] = running
    op = ensure(body, live)
    if op is not None and running and any(f.startswith("spec.template") for f in op.fields):
        return None
    return op


def cleanup(rendered: list[Obj], on_delete: list[Obj]) -> list[Op]:
    """Deleting a Model: delete its workloads and Jobs, then create ``on_delete``'s Jobs."""
    deletes = [_op("delete", o) for o in reversed(rendered) if o["kind"] in DELETED_ON_CLEANUP]
    return deletes + [_op("create", o, o) for o in on_delete]


def delete(obj: Obj) -> Op:
    """The DELETE of ``obj``, its dependents (a Job's pods) collected in the background."""
    options = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"}
    return _op("delete", obj, options)


def scale(deployment: Obj, replicas: int) -> Op:
    """The merge patch that sets a Deployment's replicas (nothing else of it)."""
    return _op("patch", deployment, {"spec": {"replicas": replicas}})
