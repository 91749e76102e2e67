"""A ModelCache's status from what the reconcile saw: its plan (or why there is none), its
Jobs and, for NodeLocal, the nodes it fills. Pure.

Phases: ``Failed`` for a spec no Job can serve or a Job that gave up (the Job's reason in
the message; a new spec gets new Jobs); ``Pending`` while there is nowhere to download to
(an existing claim that is not there, no node matching a NodeLocal selector);
``Provisioning`` while a Job runs; ``Ready`` once every Job succeeded, with ``path`` set.
The ``Ready`` condition says the same with a reason; both carry the generation they saw.
``sizeBytes`` (a string, as the operator writes it) is what the prefetch Jobs reported,
once Ready.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from flexinfer_common.api import ModelCache
from flexinfer_common.api.meta import Condition, set_condition
from flexinfer_common.api.modelcache import ModelCachePhase, ModelCacheStatus
from flexinfer_controller.core.cache import CacheState, CacheStatus
from flexinfer_controller.legacy.modelcache.plan import CachePlan, CacheSpecError, job_node
from flexinfer_controller.runtime.kubernetes.gate import job_state
from flexinfer_controller.runtime.kubernetes.names import Obj

EPHEMERAL_MESSAGE = (
    "storageStrategy Ephemeral: the weights are fetched into each pod's emptyDir when it "
    "starts; nothing is cached ahead"
)


@dataclass(frozen=True)
class Observed:
    """What the reconcile found on the cluster for the current plan."""

    jobs: list[Obj] = field(default_factory=list)
    """The live Jobs the plan wants (as listed or just created)."""
    nodes: list[str] = field(default_factory=list)
    """The nodes a NodeLocal cache fills."""
    claim_missing: bool = False
    """spec.existingClaimName names no PVC."""
    storage: Condition | None = None
    """The StorageResized condition of this pass (``resize``); None: unchanged."""


@dataclass(frozen=True)
class Verdict:
    """Phase, condition reason and message, and the counts of a status."""

    phase: ModelCachePhase
    reason: str
    message: str
    path: str | None = None
    ready_nodes: int = 0
    total_nodes: int = 0


def _jobs_verdict(plan: CachePlan, observed: Observed) -> Verdict:
    states = [(job_node(job), job_state(job)) for job in observed.jobs]
    local = plan.strategy == "NodeLocal"
    total = len(observed.nodes) if local else 0
    ready = sum(1 for _, s in states if s.status is CacheStatus.READY) if local else 0
    for node, state in states:
        if state.status is CacheStatus.FAILED:
            where = f"on node {node}: " if node else ""
            return Verdict(ModelCachePhase.FAILED, state.reason, where + state.message, None,
                           ready, total)  # fmt: skip
    if states and all(s.status is CacheStatus.READY for _, s in states):
        message = _ready_message(plan, states)
        return Verdict(ModelCachePhase.READY, "Cached", message, plan.path, ready, total)
    running = [s for _, s in states if s.status is CacheStatus.PENDING]
    first = running[0] if running else CacheState.pending("PrefetchRunning", "creating the Job")
    message = first.message + (f" ({ready} of {total} nodes ready)" if local else "")
    return Verdict(ModelCachePhase.PROVISIONING, first.reason, message, None, ready, total)


def _ready_message(plan: CachePlan, states: list[tuple[str | None, CacheState]]) -> str:
    if plan.strategy == "NodeLocal":
        return f"downloaded on {len(states)} node(s) to {plan.path}"
    return f"downloaded to {plan.path}"


def verdict(plan: CachePlan | CacheSpecError, observed: Observed) -> Verdict:
    """The phase and reason for ``plan`` (or its error) given what was observed."""
    if isinstance(plan, CacheSpecError):
        return Verdict(ModelCachePhase.FAILED, plan.reason, plan.message)
    if plan.strategy == "Ephemeral":
        return Verdict(ModelCachePhase.READY, "Ephemeral", EPHEMERAL_MESSAGE)
    if observed.claim_missing:
        message = f"spec.existingClaimName {plan.claim}: no such PersistentVolumeClaim yet"
        return Verdict(ModelCachePhase.PENDING, "ClaimNotFound", message)
    if plan.strategy == "NodeLocal" and not observed.nodes:
        selector = ",".join(f"{k}={v}" for k, v in sorted(plan.node_selector.items()))
        message = f"no node matches the nodeSelector {selector}"
        return Verdict(ModelCachePhase.PENDING, "NoMatchingNodes", message)
    return _jobs_verdict(plan, observed)


def size_of(message: str | None) -> int | None:
    """The bytes a prefetch container reported in its termination message
    (``{"sizeBytes": N}``); None when it said nothing readable."""
    try:
        size = json.loads(message or "").get("sizeBytes")
    except (ValueError, AttributeError):
        return None
    return size if isinstance(size, int) and not isinstance(size, bool) and size >= 0 else None


def status_of(
    cache: ModelCache, found: Verdict, observed: Observed, size_bytes: str | None = None
) -> ModelCacheStatus:
    """The status to write: ``found`` on ``cache``'s status, the Ready condition (and the
    StorageResized one this pass set) merged in, each transition time kept while its
    status does not change."""
    condition = Condition(
        type="Ready",
        status="True" if found.phase is ModelCachePhase.READY else "False",
        reason=found.reason,
        message=found.message,
        observed_generation=cache.metadata.generation,
    )
    conditions = set_condition(list(cache.status.conditions), condition)
    if observed.storage is not None:
        conditions = set_condition(conditions, observed.storage)
    return ModelCacheStatus(
        phase=found.phase,
        path=found.path,
        size_bytes=size_bytes,
        ready_nodes=found.ready_nodes,
        total_nodes=found.total_nodes,
        conditions=conditions,
    )


def pending(found: Verdict) -> bool:
    """Whether the cache is to be looked at again soon (a Job runs, or nothing to fill yet)."""
    return found.phase in (ModelCachePhase.PROVISIONING, ModelCachePhase.PENDING)
