"""Tenant fair share: a tenant below its GPU quota gets a boost, one above it a penalty.

A pod's tenant is the value of its ``SCHED_TENANT_LABEL_KEY`` label, else its namespace. Its
current GPUs are what the live pods of that tenant in the pod's namespace request, plus the
pod itself; against its quota (``SCHED_TENANT_QUOTAS``, else
``SCHED_TENANT_FAIRSHARE_BUDGET_GPUS``):

    adjustment = (1 - used / quota) x SCHED_TENANT_FAIRSHARE_WEIGHT

The adjustment is the same for every node of one decision: it moves a pod's scores, not
their order, and says how much headroom the tenant has (exported as a metric).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from flexinfer_common.placement.facts import PodFacts
from flexinfer_common.placement.weights import PlacementWeights


@dataclass(frozen=True, slots=True)
class TenantShare:
    """One tenant's usage against its quota, and the resulting score adjustment."""

    tenant: str
    used_gpus: float
    usage_ratio: float
    adjustment: float


class TenantPods(Protocol):
    """The pods of a namespace (to count the GPUs each tenant holds)."""

    async def pods(self, namespace: str) -> Sequence[PodFacts]:
        """Every pod of ``namespace``, terminal ones included."""


class InMemoryTenantPods:
    """Pods given as facts."""

    def __init__(self, pods: Iterable[PodFacts] = ()) -> None:
        self._pods = list(pods)

    async def pods(self, namespace: str) -> Sequence[PodFacts]:
        """The pods of ``namespace``."""
        return [pod for pod in self._pods if pod.namespace == namespace]


def tenant_share(
    pod: PodFacts, others: Iterable[PodFacts], weights: PlacementWeights
) -> TenantShare | None:
    """The pod's tenant share; None when the tenant has no quota (0: no adjustment)."""
    tenant = pod.tenant(weights.tenant_label_key)
    quota = weights.quota(tenant)
    if quota <= 0:
        return None
    used = float(pod.gpu_count)
    for other in others:
        if other.terminal or (other.namespace, other.name) == (pod.namespace, pod.name):
            continue
        if other.tenant(weights.tenant_label_key) == tenant:
            used += other.gpu_count
    ratio = used / quota
    return TenantShare(tenant, used, ratio, (1.0 - ratio) * weights.tenant_fairshare_weight)
