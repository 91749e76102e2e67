"""Reconcile one ModelCache key: level-triggered, idempotent, restart-safe.

Every pass reads the cache (from the informer's copy), lists its Jobs by label, creates
what the plan wants and is missing, deletes what it no longer wants (an old spec's Jobs,
a node that left the selector), and writes the status only when it changed. Names are
derived from the spec, so a pass after a crash finds what the last one created instead of
creating it twice, and a create that loses a race (409) reads the winner.

A deleted cache's Jobs and PVC are deleted here explicitly: on a cluster their owner
reference would let the garbage collector do it, but not every apiserver runs one (the
fake apiserver does not), and a prompt delete stops a running download at once. An
``existingClaimName`` PVC is never deleted: it is not ours (no owner reference, no
``flexinfer.ai/modelcache-key`` annotation).

Errors: a spec no Job can serve, or an object the apiserver rejects (422), is permanent:
written to status, looked at again only at the next change or resync. Anything else
(``StoreError``: the apiserver unreachable) propagates to the worker, which retries with
backoff.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol

from flexinfer_common.api import ModelCache
from flexinfer_common.api.modelcache import ModelCacheStatus
from flexinfer_common.errors import ConflictError, InvalidSpecError, TemporaryError
from flexinfer_controller.legacy.modelcache import plan as plans
from flexinfer_controller.legacy.modelcache.plan import CachePlan, CacheSpecError, JobOptions
from flexinfer_controller.legacy.modelcache.status import Observed, pending, status_of, verdict
from flexinfer_controller.runtime.kubernetes.names import Obj, object_name

log = logging.getLogger(__name__)


class CacheCluster(Protocol):
    """The cluster as the reconcile sees it (``adapters.kube.modelcaches`` implements it)."""

    def cache(self, key: str) -> ModelCache | None:
        """The ModelCache ``key`` as last seen; None when it is gone."""

    async def list_jobs(self, namespace: str, cache_name: str) -> list[Obj]:
        """The Jobs labelled for the cache (``flexinfer.ai/modelcache``)."""

    async def nodes(self, selector: dict[str, str]) -> list[str]:
        """Names of the nodes carrying every label of ``selector``."""

    async def get(self, obj: Obj) -> Obj | None:
        """The live object of ``obj`` (kind, namespace, name), None when absent."""

    async def create(self, obj: Obj) -> Obj:
        """Create ``obj``; ConflictError when its name is taken."""

    async def delete(self, obj: Obj) -> None:
        """Delete ``obj`` (and a Job's pods); nothing when it is gone already."""

    async def write_status(self, cache: ModelCache, status: ModelCacheStatus) -> None:
        """Write ``status`` through the status subresource (nothing when the cache is gone)."""


@dataclass(frozen=True)
class Timing:
    """When to look at a cache again without any event."""

    poll_s: float
    """While a Job runs or there is nowhere to download to (nothing watches Jobs)."""
    resync_s: float
    """Otherwise: a NodeLocal selector may match new nodes, a Job may have been deleted."""


class ModelCacheReconciler:
    """Brings one ModelCache's PVC and Jobs to its spec and reports them in its status."""

    def __init__(self, cluster: CacheCluster, options: JobOptions, timing: Timing) -> None:
        self._cluster = cluster
        self._options = options
        self._timing = timing

    async def reconcile(self, key: str) -> float | None:
        """One pass over ``key``; the delay before the next look (None: only on events)."""
        cache = self._cluster.cache(key)
        if cache is None:
            await self.clean(key)
            return None
        try:
            plan: CachePlan | CacheSpecError = plans.plan(cache)
        except CacheSpecError as exc:
            plan = exc
        try:
            observed = await self._converge(cache, plan)
        except InvalidSpecError as exc:  # the apiserver refused an object: the spec decides
            plan, observed = CacheSpecError("Rejected", str(exc)), Observed()
        found = verdict(plan, observed)
        status = status_of(cache, found)
        if status != cache.status:
            if status.phase != cache.status.phase:
                log.info("modelcache %s: %s -> %s (%s: %s)", key, cache.status.phase,
                         status.phase, found.reason, found.message)  # fmt: skip
            await self._cluster.write_status(cache, status)
        return self._timing.poll_s if pending(found) else self._timing.resync_s

    async def _converge(self, cache: ModelCache, plan: CachePlan | CacheSpecError) -> Observed:
        key, meta = plans.cache_key(cache), cache.metadata
        live = [j for j in await self._cluster.list_jobs(meta.namespace, meta.name)
                if plans.owned_by(j, key)]  # fmt: skip
        if isinstance(plan, CacheSpecError) or plan.fetch is None:
            await self._delete_all(live)
            return Observed()
        claim_missing = await self._storage(plan)
        nodes = (
            await self._cluster.nodes(plan.node_selector) if plan.strategy == "NodeLocal" else []
        )
        desired = [] if claim_missing else plans.download_jobs(plan, self._options, nodes)
        present = {j["metadata"]["name"]: j for j in live}
        current = [present.get(j["metadata"]["name"]) or await self._create(j) for j in desired]
        wanted = {j["metadata"]["name"] for j in desired}
        await self._delete_all([j for j in live if j["metadata"]["name"] not in wanted])
        return Observed(current, nodes, claim_missing)

    async def _storage(self, plan: CachePlan) -> bool:
        """Create the cache's PVC if it is ours; whether an existing claim is missing."""
        claim = plans.claim_object(plan)
        if claim is not None:
            if await self._cluster.get(claim) is None:
                await self._create(claim)
            return False
        if plan.claim is not None:
            stub = _stub("PersistentVolumeClaim", plan.cache.metadata.namespace, plan.claim)
            return await self._cluster.get(stub) is None
        return False

    async def _create(self, obj: Obj) -> Obj:
        """Create ``obj``; one created meanwhile (409) is read instead."""
        meta = obj["metadata"]
        try:
            created = await self._cluster.create(obj)
            log.info("modelcache: created %s %s/%s", obj["kind"], meta["namespace"], meta["name"])
            return created
        except ConflictError as exc:
            found = await self._cluster.get(obj)
            if found is None:  # deleted between the create and the read: try again soon
                raise TemporaryError(
                    f"{obj['kind']} {meta['name']} came and went", delay=0.5
                ) from exc
            return found

    async def _delete_all(self, objects: list[Obj]) -> None:
        for obj in objects:
            meta = obj["metadata"]
            log.info("modelcache: deleting %s %s/%s", obj.get("kind", "Job"), meta["namespace"],
                     meta["name"])  # fmt: skip
            await self._cluster.delete({"kind": "Job", **obj} if "kind" not in obj else obj)

    async def clean(self, key: str) -> None:
        """The ModelCache ``key`` is gone: delete its Jobs and the PVC made for it."""
        namespace, _, name = key.partition("/")
        jobs = await self._cluster.list_jobs(namespace, name)
        await self._delete_all([j for j in jobs if plans.owned_by(j, key)])
        claim = await self._cluster.get(
            _stub("PersistentVolumeClaim", namespace, object_name(name, "cache"))
        )
        if claim is not None and plans.owned_by(claim, key):
            await self._delete_all([{"kind": "PersistentVolumeClaim", **claim}])


def _stub(kind: str, namespace: str, name: str) -> Obj:
    return {"kind": kind, "metadata": {"name": name, "namespace": namespace}}
