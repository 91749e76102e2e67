"""Reconcile one ModelCache key: level-triggered, idempotent, restart-safe.

Every pass reads the cache (from the informer's copy), lists its Jobs by label, creates
what the plan wants and is missing, deletes what it no longer wants (an old spec's Jobs,
a node that left the selector), and writes the status only when it changed. Names are
derived from the spec, so a pass after a crash finds what the last one created instead of
creating it twice, and a create that loses a race (409) reads the winner.

The PVC made for a cache follows a grown ``storageSize`` (``resize``: expansion only).
Once Ready, ``sizeBytes`` is read from the prefetch Jobs' pods (what their container wrote
to its termination message), once per path.

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
from flexinfer_common.api.meta import Condition
from flexinfer_common.api.modelcache import ModelCachePhase, ModelCacheStatus
from flexinfer_common.errors import ConflictError, InvalidSpecError, TemporaryError
from flexinfer_controller.legacy.modelcache import plan as plans
from flexinfer_controller.legacy.modelcache.plan import CachePlan, CacheSpecError, JobOptions
from flexinfer_controller.legacy.modelcache.resize import rejected, resize
from flexinfer_controller.legacy.modelcache.status import (
    Observed,
    Verdict,
    pending,
    size_of,
    status_of,
    verdict,
)
from flexinfer_controller.runtime.kubernetes.jobs import PREFETCH_CONTAINER
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

    async def termination_message(self, job: Obj, container: str) -> str | None:
        """What ``container`` wrote to its termination log in the Job's pod that succeeded."""

    async def resize_claim(self, claim: Obj, storage: str) -> None:
        """Raise the PVC's storage request (InvalidSpecError when the apiserver refuses)."""


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
        status = status_of(cache, found, observed, await self._size(cache, found, observed))
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
        claim_missing, storage = await self._storage(plan)
        nodes = (
            await self._cluster.nodes(plan.node_selector) if plan.strategy == "NodeLocal" else []
        )
        desired = [] if claim_missing else plans.download_jobs(plan, self._options, nodes)
        present = {j["metadata"]["name"]: j for j in live}
        current = [present.get(j["metadata"]["name"]) or await self._create(j) for j in desired]
        wanted = {j["metadata"]["name"] for j in desired}
        await self._delete_all([j for j in live if j["metadata"]["name"] not in wanted])
        return Observed(current, nodes, claim_missing, storage)

    async def _storage(self, plan: CachePlan) -> tuple[bool, Condition | None]:
        """Create the cache's PVC if it is ours, or resize it; whether an existing claim is
        missing, and the StorageResized condition to set."""
        claim = plans.claim_object(plan)
        if claim is not None:
            live = await self._cluster.get(claim)
            if live is None:
                await self._create(claim)
                return False, None
            return False, await self._resize(plan.cache, live)
        if plan.claim is not None:
            stub = _stub("PersistentVolumeClaim", plan.cache.metadata.namespace, plan.claim)
            return await self._cluster.get(stub) is None, None
        return False, None

    async def _resize(self, cache: ModelCache, claim: Obj) -> Condition | None:
        """Raise the claim's request to a grown spec.storageSize; never shrink it."""
        step = resize(cache, claim)
        if step.grow_to is None:
            return step.condition
        try:
            await self._cluster.resize_claim(claim, step.grow_to)
        except InvalidSpecError as exc:  # no expansion in its StorageClass, say
            log.warning("modelcache %s: %s", plans.cache_key(cache), exc)
            return rejected(cache, step.grow_to, str(exc))
        log.info("modelcache %s: claim %s raised to %s", plans.cache_key(cache),
                 claim["metadata"]["name"], step.grow_to)  # fmt: skip
        return step.condition

    async def _size(self, cache: ModelCache, found: Verdict, observed: Observed) -> str | None:
        """status.sizeBytes once Ready: what the prefetch Jobs reported (the largest, for a
        NodeLocal cache's copies), kept from the last pass while the path is the same."""
        if found.phase is not ModelCachePhase.READY or not observed.jobs:
            return None
        last = cache.status
        if last.phase is ModelCachePhase.READY and last.path == found.path and last.size_bytes:
            return last.size_bytes
        messages = [await self._cluster.termination_message(job, PREFETCH_CONTAINER)
                    for job in observed.jobs]  # fmt: skip
        sizes = [size for m in messages if (size := size_of(m)) is not None]
        return str(max(sizes)) if sizes else None

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
