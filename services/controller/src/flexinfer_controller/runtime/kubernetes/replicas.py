"""The kubernetes runtime's view of its replicas: pods, plus the ones asked for and not yet made.

A start raises the Deployment's replicas before the ReplicaSet has created the pod, so
until the pod appears the replica is a placeholder (STARTING), counted so that the next
reconcile does not ask for it again.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from flexinfer_controller.runtime.base import Replica, ReplicaState
from flexinfer_controller.runtime.kubernetes.names import Obj
from flexinfer_controller.runtime.kubernetes.pods import (
    GENERATION_ANNOTATION,
    TEMPLATE_HASH_ANNOTATION,
    PodView,
)

PENDING = "pending:"
"""Placeholder replica ids: ``pending:<namespace>/<name>:<n>``."""


@dataclass(frozen=True, slots=True)
class Wanted:
    """What the Model's Deployment was last set to (by us, or as read on adoption)."""

    namespace: str
    deployment: str
    generation: int
    template_hash: str
    replicas: int


def wanted_of(live: Obj) -> Wanted:
    """What a live Deployment of a Model is set to (its stamps and replicas)."""
    template = live["spec"]["template"]["metadata"].get("annotations") or {}
    notes = live["metadata"].get("annotations") or {}
    return Wanted(
        namespace=live["metadata"]["namespace"],
        deployment=live["metadata"]["name"],
        generation=int(notes.get(GENERATION_ANNOTATION) or 0),
        template_hash=template.get(TEMPLATE_HASH_ANNOTATION, ""),
        replicas=int(live["spec"].get("replicas") or 0),
    )


def placeholder_model(replica_id: str) -> str | None:
    """The Model of a placeholder id; None for a pod's id."""
    if not replica_id.startswith(PENDING):
        return None
    return replica_id[len(PENDING) :].rpartition(":")[0]


def as_replica(pod: PodView, wanted: Wanted | None, ready_at: float | None) -> Replica:
    """The pod as a replica; a pod of an older template has generation 0 (stale)."""
    current = wanted is not None and pod.template_hash == wanted.template_hash
    return Replica(
        id=pod.key,
        model=pod.model,
        generation=wanted.generation if current and wanted is not None else 0,
        state=ReplicaState.READY if pod.ready and pod.url else ReplicaState.STARTING,
        url=pod.url if pod.ready else None,
        node=pod.node,
        started_at=pod.created_at,
        ready_at=ready_at if pod.ready else None,
    )


def as_sleeper(pod: PodView, wanted: Wanted | None) -> Replica:
    """A sleeping pod as a SLEEPING replica (its address kept: its wake is sent there)."""
    replica = as_replica(pod, wanted, None)
    return replace(replica, state=ReplicaState.SLEEPING, url=pod.url)


def replicas_of(
    model: str,
    pods: list[PodView],
    wanted: Wanted | None,
    ready_at: dict[str, float],
    asleep: list[PodView] | None = None,
) -> list[Replica]:
    """The live replicas of ``model``: its pods, then placeholders for pods still to come
    (``asleep``: its sleeping pods, made already though not live)."""
    out = [as_replica(p, wanted, ready_at.get(p.key)) for p in pods]
    if wanted is None:
        return out
    made = [*pods, *(asleep or [])]
    current = sum(p.template_hash == wanted.template_hash for p in made)
    for index in range(current, wanted.replicas):
        out.append(
            Replica(
                id=f"{PENDING}{model}:{index}",
                model=model,
                generation=wanted.generation,
                state=ReplicaState.STARTING,
            )
        )
    return out
