"""The ModelDeployment bridge: serves each v1alpha1 ModelDeployment through a v1alpha2 Model.

Level-triggered and idempotent like the Model reconcile: every pass reads the
ModelDeployment and the Model of its key afresh and moves them one step towards

* a Model equal to ``to_model`` of the ModelDeployment (spec, labels, annotations, a
  controller ownerReference), written only while it carries the bridge's label;
* the ModelDeployment's status mirroring the Model's (v1alpha1 phases and conditions);
* with ``spec.modelCacheRef``: the Model reading the ModelCache's path once it is Ready, held
  until then (``cache_ref``), and the ModelDeployment Failed with a Failed cache's message;
* on delete: the Model deleted and gone (its own cleanup finalizer ran) before the
  ModelDeployment's ``flexinfer.ai/cleanup`` finalizer is removed.

A crash between any two steps leaves state the next pass reads and finishes: the Model is
found by name (never created twice) and the finalizer keeps the ModelDeployment until its
Model is gone (no orphan). An invalid ModelDeployment or a name taken by a Model the bridge
does not manage is written to status (Failed) and not retried until something changes;
apiserver errors raise, and the worker retries them with backoff.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from flexinfer_common.api import DEPLOYMENT_FINALIZER
from flexinfer_common.api.modeldeployment import ModelDeployment, ModelDeploymentStatus
from flexinfer_common.errors import InvalidSpecError
from flexinfer_controller.core.feed import ModelFeed
from flexinfer_controller.core.queue import WorkQueue
from flexinfer_controller.core.workers import Backoff, Tasks
from flexinfer_controller.legacy import deployment_status as statuses
from flexinfer_controller.legacy.cache_ref import NO_CACHE, CacheBinding, apply_binding, binding
from flexinfer_controller.legacy.deployments import (
    desired_model,
    is_managed,
    keeping_controller_notes,
    model_differs,
    parse_deployment,
)

log = logging.getLogger(__name__)
Obj = dict[str, Any]
MAX_ERROR_DELAY_S = 30.0


class DeploymentApi(Protocol):
    """The apiserver as the bridge uses it (``adapters.kube.deployments`` implements it)."""

    async def get_deployment(self, namespace: str, name: str) -> Obj | None:
        """The stored ModelDeployment, or None."""

    async def add_deployment_finalizer(self, namespace: str, name: str) -> Obj:
        """The ModelDeployment, holding the bridge's finalizer."""

    async def remove_deployment_finalizer(self, namespace: str, name: str) -> None:
        """The ModelDeployment without the bridge's finalizer (gone if it was the last)."""

    async def write_deployment_status(
        self, namespace: str, name: str, resource_version: str, status: Obj
    ) -> None:
        """The status, through the status subresource, if ``resource_version`` is current."""

    async def get_model_cache(self, namespace: str, name: str) -> Obj | None:
        """The ModelCache a ModelDeployment references, or None when there is none."""

    async def get_model(self, namespace: str, name: str) -> Obj | None:
        """The stored Model, or None."""

    async def create_model(self, body: Obj) -> Obj:
        """Create the Model (ConflictError when the name is taken); the stored Model."""

    async def update_model(self, resource_version: str, body: Obj) -> Obj:
        """Labels, annotations, ownerReferences and spec of ``body``, if the version is current."""

    async def delete_model(self, namespace: str, name: str) -> None:
        """Delete the Model (its finalizers hold it a while); absent is fine."""


class DeploymentReconciler:
    """One pass over one ModelDeployment key."""

    def __init__(self, api: DeploymentApi) -> None:
        self._api = api

    async def reconcile(self, key: str) -> None:
        """Move the ModelDeployment ``key`` and its Model one step towards what it declares."""
        namespace, name = key.split("/", 1)
        found = await self._api.get_deployment(namespace, name)
        if found is None:
            return  # gone: its Model went first (the finalizer saw to it)
        if found["metadata"].get("deletionTimestamp"):
            await self._finalize(found)
            return
        if DEPLOYMENT_FINALIZER not in (found["metadata"].get("finalizers") or []):
            found = await self._api.add_deployment_finalizer(namespace, name)
        try:
            deployment = parse_deployment(found)
            desired = desired_model(deployment, str(found["metadata"]["uid"]))
        except InvalidSpecError as exc:
            log.warning("modeldeployment %s: %s", meta_key(found), exc)
            await self._fail(found, statuses.VALIDATION_FAILED, str(exc)[:4096])
            return
        cache = await self._cache_binding(deployment)
        await self._sync(found, deployment, apply_binding(desired, cache), cache)

    async def _cache_binding(self, deployment: ModelDeployment) -> CacheBinding:
        ref, namespace = deployment.spec.model_cache_ref, deployment.metadata.namespace
        if not ref:
            return NO_CACHE
        return binding(namespace, ref, await self._api.get_model_cache(namespace, ref))

    async def _sync(
        self, found: Obj, deployment: ModelDeployment, desired: Obj, cache: CacheBinding
    ) -> None:
        meta = deployment.metadata
        model = await self._api.get_model(meta.namespace, meta.name)
        if model is not None and not is_managed(model):
            message = (
                f"Model {meta.namespace}/{meta.name} exists and is not managed by this"
                " ModelDeployment (it lacks the label flexinfer.ai/managed-by=modeldeployment);"
                " delete that Model or rename the ModelDeployment"
            )
            await self._fail(found, statuses.MODEL_NOT_MANAGED, message)
            return
        if model is not None:
            desired = keeping_controller_notes(desired, model)
        if model is None:
            model = await self._api.create_model(desired)
            log.info("modeldeployment %s: created its Model", meta_key(found))
        elif model_differs(model, desired):
            model = await self._api.update_model(str(model["metadata"]["resourceVersion"]), desired)
            log.info("modeldeployment %s: updated its Model", meta_key(found))
        if cache.hold is not None and cache.hold.failed:
            # Said at once, not after the held Model's reconcile writes the same reason.
            await self._fail(found, cache.hold.reason, cache.hold.message)
            return
        status = statuses.mirrored(deployment.status, meta.generation, model)
        await self._write_status(found, status)

    async def _fail(self, found: Obj, reason: str, message: str) -> None:
        generation = found["metadata"].get("generation")
        status = statuses.failed(statuses.stored(found), generation, reason, message)
        await self._write_status(found, status)

    async def _finalize(self, found: Obj) -> None:
        meta = found["metadata"]
        namespace, name = meta.get("namespace", ""), meta["name"]
        if DEPLOYMENT_FINALIZER not in (meta.get("finalizers") or []):
            return  # another controller's finalizer holds it; ours is done
        status = statuses.terminating(statuses.stored(found), meta.get("generation"))
        await self._write_status(found, status)
        model = await self._api.get_model(namespace, name)
        if model is not None and is_managed(model):
            if not model["metadata"].get("deletionTimestamp"):
                await self._api.delete_model(namespace, name)
                log.info("modeldeployment %s: deleting its Model", meta_key(found))
            return  # the Model's DELETED event brings this key back
        await self._api.remove_deployment_finalizer(namespace, name)
        log.info("modeldeployment %s: its Model is gone; released", meta_key(found))

    async def _write_status(self, found: Obj, status: ModelDeploymentStatus) -> None:
        dumped = _dumped(status)
        if dumped == _dumped(statuses.stored(found)):
            return  # unchanged: no write, so no event and no second pass
        meta = found["metadata"]
        namespace, version = meta.get("namespace", ""), str(meta["resourceVersion"])
        await self._api.write_deployment_status(namespace, meta["name"], version, dumped)


def meta_key(found: Obj) -> str:
    """namespace/name of a stored object."""
    return f"{found['metadata'].get('namespace', '')}/{found['metadata']['name']}"


def _dumped(status: ModelDeploymentStatus) -> Obj:
    return status.model_dump(mode="json", by_alias=True, exclude_none=True)


class DeploymentBridge:
    """The bridge's work queue, workers and feed (the apiserver's informers)."""

    def __init__(self, api: DeploymentApi, feed: ModelFeed, workers: int = 2) -> None:
        self.queue = WorkQueue()
        self.reconciler = DeploymentReconciler(api)
        self._feed = feed
        self._workers = workers
        self._backoff = Backoff(max_s=MAX_ERROR_DELAY_S)
        self._tasks = Tasks()

    async def start(self) -> None:
        """Start the workers and the feed."""
        reconcile = self.reconciler.reconcile
        self._tasks.spawn_workers(
            self._workers, self.queue, reconcile, self._backoff, "modeldeployment"
        )
        self._tasks.spawn(self._feed.run(self.queue.add), "modeldeployment-feed")

    async def stop(self) -> None:
        """Stop everything; a pass in flight is cancelled (the next start redoes it)."""
        self.queue.shut_down()
        await self._tasks.cancel()
