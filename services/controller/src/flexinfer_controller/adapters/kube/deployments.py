"""ModelDeployments (ai.flexinfer/v1alpha1) on Kubernetes: the bridge's apiserver side.

``ApiServerDeployments`` is the bridge's ``DeploymentApi``; ``DeploymentInformerFeed``
follows ModelDeployments, Models and ModelCaches (through the informers it shares with the
Model controller and the ModelCache loop) and queues the key of every
ModelDeployment whose own object, Model or referenced ModelCache changed (a Model's status
change is what the mirror follows; a cache's, what its ``modelCacheRef`` binds to).

``MODEL_DEPLOYMENTS`` is declared here, not in ``resources``: the RBAC test grants every
generic custom-object verb to the kinds listed there, and the bridge never creates or
deletes a ModelDeployment (its verbs are taken from a run against the fake apiserver).
"""

from __future__ import annotations

import asyncio
import contextlib

from flexinfer_common.api import API_GROUP, DEPLOYMENT_FINALIZER, DEPLOYMENT_KIND
from flexinfer_common.errors import NotFoundError, TemporaryError
from flexinfer_common.kube.client import KubeClient, Obj, Resource
from flexinfer_common.kube.informer import Change, Informer, ListWatch
from flexinfer_controller.adapters.kube.finalizers import add_finalizer, remove_finalizer
from flexinfer_controller.adapters.kube.modelcaches import ModelCacheListWatch
from flexinfer_controller.adapters.kube.objects import (
    CustomListWatch,
    CustomObjects,
    JsonPatch,
    version_guard,
)
from flexinfer_controller.adapters.kube.resources import MODELS
from flexinfer_controller.adapters.kube.shared import SharedInformer, SharedInformers
from flexinfer_controller.core.feed import Enqueue
from flexinfer_controller.legacy.deployment_bridge import DeploymentBridge
from flexinfer_controller.legacy.deployments import is_managed

MODEL_DEPLOYMENTS = Resource(API_GROUP, "v1alpha1", "modeldeployments", DEPLOYMENT_KIND)


class CacheInformers:
    """The feed's informers of ModelCaches, which the bridge reads caches from (no GET:
    the controller only lists and watches ModelCaches)."""

    def __init__(self) -> None:
        self.informers: list[Informer[Obj]] = []

    def get(self, namespace: str, name: str) -> Obj | None:
        """The ModelCache as last seen; TemporaryError before every informer listed once
        (an unlisted cache would read as absent and stop a Model that runs from it)."""
        if not self.informers or not all(i.synced.is_set() for i in self.informers):
            raise TemporaryError("modelcaches are not listed yet", delay=0.2)
        key = f"{namespace}/{name}"
        return next((found for i in self.informers if (found := i.get(key))), None)


class ApiServerDeployments:
    """ModelDeployments and their Models as custom resources (the bridge's DeploymentApi)."""

    def __init__(self, client: KubeClient, caches: CacheInformers) -> None:
        self._deployments = CustomObjects(client, MODEL_DEPLOYMENTS)
        self._models = CustomObjects(client, MODELS)
        self._caches = caches

    async def get_deployment(self, namespace: str, name: str) -> Obj | None:
        """The stored ModelDeployment, or None."""
        return await _get(self._deployments, namespace, name)

    async def add_deployment_finalizer(self, namespace: str, name: str) -> Obj:
        """The ModelDeployment, holding ``flexinfer.ai/cleanup``."""
        return await add_finalizer(self._deployments, namespace, name, DEPLOYMENT_FINALIZER)

    async def remove_deployment_finalizer(self, namespace: str, name: str) -> None:
        """The ModelDeployment without ``flexinfer.ai/cleanup``."""
        await remove_finalizer(self._deployments, namespace, name, DEPLOYMENT_FINALIZER)

    async def write_deployment_status(
        self, namespace: str, name: str, resource_version: str, status: Obj
    ) -> None:
        """The whole status through the subresource; ConflictError when the version is stale."""
        ops: JsonPatch = [
            *version_guard(resource_version),
            {"op": "add", "path": "/status", "value": status},
        ]
        await self._deployments.json_patch_status(namespace, name, ops)

    async def get_model_cache(self, namespace: str, name: str) -> Obj | None:
        """The ModelCache from the feed's informers, or None."""
        return self._caches.get(namespace, name)

    async def get_model(self, namespace: str, name: str) -> Obj | None:
        """The stored Model, or None."""
        return await _get(self._models, namespace, name)

    async def create_model(self, body: Obj) -> Obj:
        """POST the Model; ConflictError when the name is taken."""
        return await self._models.create(body["metadata"]["namespace"], body)

    async def update_model(self, resource_version: str, body: Obj) -> Obj:
        """The bridged metadata and the spec in one guarded patch (finalizers are untouched:
        the Model's own cleanup finalizer is the Model controller's)."""
        meta = body["metadata"]
        ops: JsonPatch = [
            *version_guard(resource_version),
            *(
                {"op": "add", "path": f"/metadata/{field}", "value": meta[field]}
                for field in ("labels", "annotations", "ownerReferences")
            ),
            {"op": "add", "path": "/spec", "value": body["spec"]},
        ]
        return await self._models.json_patch(meta["namespace"], meta["name"], ops)

    async def delete_model(self, namespace: str, name: str) -> None:
        """DELETE the Model; already gone is fine."""
        with contextlib.suppress(NotFoundError):
            await self._models.delete(namespace, name)


async def _get(objects: CustomObjects, namespace: str, name: str) -> Obj | None:
    try:
        return await objects.get(namespace, name)
    except NotFoundError:
        return None


class DeploymentInformerFeed:
    """ModelDeployment keys to reconcile: every change of one, of its Model, or of the
    ModelCache it references (the Models' and ModelCaches' informers are shared)."""

    def __init__(
        self,
        client: KubeClient,
        namespaces: list[str | None],
        informers: SharedInformers,
        caches: CacheInformers | None = None,
    ) -> None:
        self._client = client
        self._namespaces = namespaces
        self._shared = informers
        self.caches = caches or CacheInformers()
        self.informers: list[Informer[Obj]] = []

    async def run(self, enqueue: Enqueue) -> None:
        """Follow ModelDeployments, Models and ModelCaches in every namespace until cancelled."""

        def deployment_changed(change: Change) -> None:
            enqueue(change.key)

        def model_changed(change: Change) -> None:
            # A deleted Model is no longer cached, but its ModelDeployment (waiting in its
            # finalizer, or for the name to be freed) is.
            model = next((found for i in models if (found := i.get(change.key))), None)
            if any(i.get(change.key) for i in deployments) or (model and is_managed(model)):
                enqueue(change.key)

        def cache_changed(change: Change) -> None:
            for key in _referencing(deployments, change.key):
                enqueue(key)

        shared_deployments = self._follow(CustomListWatch(self._client, MODEL_DEPLOYMENTS))
        shared_models = self._follow(CustomListWatch(self._client, MODELS))
        shared_caches = self._follow(ModelCacheListWatch(self._client))
        deployments = [s.informer for s in shared_deployments]
        models = [s.informer for s in shared_models]
        self.caches.informers = [s.informer for s in shared_caches]
        self.informers = [*deployments, *models, *self.caches.informers]
        runs = [s.run(deployment_changed) for s in shared_deployments]
        runs += [s.run(model_changed) for s in shared_models]
        runs += [s.run(cache_changed) for s in shared_caches]
        await asyncio.gather(*runs)

    def _follow(self, source: ListWatch) -> list[SharedInformer]:
        return [self._shared.informer(source, ns) for ns in self._namespaces]


def _referencing(deployments: list[Informer[Obj]], cache_key: str) -> list[str]:
    """The ModelDeployments whose spec.modelCacheRef names the ModelCache ``cache_key``."""
    namespace, _, name = cache_key.partition("/")
    return [
        key
        for informer in deployments
        for key in informer.keys()  # noqa: SIM118 (an Informer, not a dict: no __iter__)
        if key.partition("/")[0] == namespace
        and ((informer.get(key) or {}).get("spec") or {}).get("modelCacheRef") == name
    ]


def deployment_bridge(
    client: KubeClient, namespaces: list[str | None], *, informers: SharedInformers | None = None
) -> DeploymentBridge:
    """The ModelDeployment bridge on ``client``, watching ``namespaces`` (None: all), through
    ``informers`` (default: its own)."""
    feed = DeploymentInformerFeed(client, namespaces, informers or SharedInformers())
    return DeploymentBridge(ApiServerDeployments(client, feed.caches), feed)
