"""The score's weights, from the seed's ``SCHED_*`` environment variables."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class PlacementWeights(BaseSettings):
    """Weights of the score's terms (``SCHED_*``; the seed's names and defaults).

    score = tps x tps_weight - util x util_weight - cost x cost_weight
            - cacheUsage x cache_weight + freeRatio x vram_free_weight
            - kvPressurePenalty + tenantAdjustment
    """

    model_config = SettingsConfigDict(env_prefix="SCHED_", extra="ignore")

    tps_weight: float = Field(default=0.7, ge=0)
    """Points per benchmarked token/s (``SCHED_TPS_WEIGHT``): prefer faster nodes; the
    largest term, since throughput is what a placement buys."""

    util_weight: float = Field(default=0.2, ge=0)
    """Points lost per percent of GPU utilisation (``SCHED_UTIL_WEIGHT``): avoid busy nodes."""

    cost_weight: float = Field(default=0.1, ge=0)
    """Points lost per unit of the node's ``flexinfer.ai/cost`` annotation
    (``SCHED_COST_WEIGHT``): prefer cheaper nodes, a tie-breaker next to throughput."""

    cache_weight: float = Field(default=0.3, ge=0)
    """Points lost per unit (0..1) of KV-cache usage (``SCHED_CACHE_WEIGHT``): avoid nodes
    whose engines' KV caches are full."""

    vram_free_weight: float = Field(default=10.0, ge=0)
    """Points for a node whose VRAM is all free, scaled by the free 0..1 ratio
    (``SCHED_VRAM_FREE_WEIGHT``): strongly prefer headroom, 10 so that it weighs as much as
    the util and cache penalties together."""

    tenant_fairshare_enabled: bool = False
    """Add the tenant fair-share adjustment (``SCHED_TENANT_FAIRSHARE_ENABLED``); off by
    default, as in the seed: it needs the pods of the namespace listed per decision."""

    tenant_fairshare_weight: float = Field(default=5.0, ge=0)
    """Points per unit of quota left, or lost per unit above it
    (``SCHED_TENANT_FAIRSHARE_WEIGHT``)."""

    tenant_fairshare_budget_gpus: float = Field(default=1.0, ge=0)
    """Each tenant's GPU quota, in GPUs, unless ``tenant_quotas`` names it
    (``SCHED_TENANT_FAIRSHARE_BUDGET_GPUS``); 0 turns the adjustment off for that tenant."""

    tenant_quotas: dict[str, float] = Field(default_factory=dict)
    """Per-tenant GPU quotas, JSON (``SCHED_TENANT_QUOTAS='{"team-a": 4}'``)."""

    tenant_label_key: str | None = None
    """The pod label naming its tenant (``SCHED_TENANT_LABEL_KEY``); unset: the namespace."""

    def quota(self, tenant: str) -> float:
        """The tenant's GPU quota."""
        return self.tenant_quotas.get(tenant, self.tenant_fairshare_budget_gpus)
