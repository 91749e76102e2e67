"""Legacy ModelCaches on Kubernetes: their informers, their status, and the loop's factory.

ModelCaches are listed and watched (one informer per watched namespace, shared with the
ModelDeployment bridge, which reads the caches its ModelDeployments reference); the reconcile
reads them from the informers' caches, never with a GET, and writes only their status
subresource. The Jobs, PVCs and nodes it acts on are ``cache_objects``'. Every call is on
the official client's ``custom`` API, so the RBAC test sees each one in this file.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from typing import Any

import pydantic

from flexinfer_common.api import API_GROUP, ModelCache
from flexinfer_common.api.modelcache import ModelCacheStatus
from flexinfer_common.errors import NotFoundError
from flexinfer_common.kube.client import (
    JSON_PATCH,
    KubeClient,
    Obj,
    Resource,
    WatchStream,
    list_json,
    watch_kwargs,
)
from flexinfer_common.kube.informer import Change, Informer
from flexinfer_controller.adapters.kube.cache_objects import CacheObjects
from flexinfer_controller.adapters.kube.convert import api_body, dump
from flexinfer_controller.adapters.kube.shared import SharedInformers
from flexinfer_controller.backends.base import SecretKeyRef
from flexinfer_controller.kube_settings import KubernetesSettings
from flexinfer_controller.legacy.modelcache.controller import ModelCacheController
from flexinfer_controller.legacy.modelcache.plan import JobOptions, cache_key
from flexinfer_controller.legacy.modelcache.reconcile import ModelCacheReconciler, Timing

log = logging.getLogger(__name__)

MODEL_CACHES = Resource(API_GROUP, "v1alpha1", "modelcaches", "ModelCache")
"""Declared here, not in ``resources``: the controller only lists, watches and writes the
status of ModelCaches, and the RBAC scan grants a file's custom-object calls to the
resources the file declares."""


class ModelCacheListWatch:
    """List and watch of ModelCaches (in one namespace, or all)."""

    kind = MODEL_CACHES.kind
    plural = MODEL_CACHES.plural

    def __init__(self, client: KubeClient) -> None:
        self._client = client

    async def list(self, namespace: str | None) -> tuple[list[Obj], str]:
        """The ModelCaches (as dicts) and the list's resourceVersion."""
        return await list_json(self._client, "list modelcaches", self._lister(namespace))

    def watch(self, namespace: str | None, resource_version: str, timeout_s: int) -> WatchStream:
        """A watch of ModelCaches after ``resource_version``."""
        kwargs = watch_kwargs(resource_version, timeout_s)
        opener = functools.partial(self._lister(namespace), watch=True, **kwargs)
        return WatchStream(opener, "watch modelcaches")

    def _lister(self, namespace: str | None) -> Callable[..., Any]:
        custom, r = self._client.custom, MODEL_CACHES
        if namespace is None:
            return functools.partial(custom.list_cluster_custom_object, r.group, r.version,
                                     r.plural)  # fmt: skip
        return functools.partial(custom.list_namespaced_custom_object, r.group, r.version,
                                 namespace, r.plural)  # fmt: skip


class ApiServerCacheCluster(CacheObjects):
    """The reconcile's ``CacheCluster`` on the apiserver: informers, Jobs, PVCs, nodes."""

    def __init__(self, client: KubeClient) -> None:
        super().__init__(client)
        self.informers: list[Informer[Obj]] = []

    def cache(self, key: str) -> ModelCache | None:
        """The ModelCache ``key`` from the informers (None: gone, or unreadable)."""
        for informer in self.informers:  # namespaces do not overlap: one holds the key
            found = informer.get(key)
            if found is not None:
                return parse_cache(found)
        return None

    async def write_status(self, cache: ModelCache, status: ModelCacheStatus) -> None:
        """The whole status through the status subresource; a vanished cache is skipped."""
        r, meta = MODEL_CACHES, cache.metadata
        ops = [{"op": "add", "path": "/status", "value": dump(status)}]
        fn = self._client.custom.patch_namespaced_custom_object_status
        try:
            await self._client.call("patch modelcaches/status", fn, r.group, r.version,
                                    meta.namespace, r.plural, meta.name, ops,
                                    _content_type=JSON_PATCH)  # fmt: skip
        except NotFoundError:
            log.info("modelcache %s is gone: status not written", cache_key(cache))


def parse_cache(found: Obj) -> ModelCache | None:
    """The ModelCache of a stored dict; None (logged) when the type refuses it."""
    try:
        return ModelCache.model_validate(api_body(found))
    except pydantic.ValidationError as exc:  # the CRD schema let through what the type refuses
        meta = found.get("metadata") or {}
        log.warning("ignoring modelcache %s/%s: %s", meta.get("namespace"), meta.get("name"), exc)
        return None


def modelcache_controller(
    client: KubeClient,
    settings: KubernetesSettings,
    *,
    workers: int = 2,
    resync_s: float = 300.0,
    informers: SharedInformers | None = None,
) -> ModelCacheController:
    """The ModelCache loop on ``client``, watching ``settings``' namespaces through
    ``informers`` (default: its own)."""
    cluster = ApiServerCacheCluster(client)
    token = settings.registry_fetch_token_secret
    options = JobOptions(
        settings.registry_image,
        settings.registry_address,
        token=SecretKeyRef(token, settings.registry_fetch_token_secret_key) if token else None,
    )
    reconciler = ModelCacheReconciler(cluster, options, Timing(settings.job_poll_s, resync_s))
    shared = informers or SharedInformers(settings.watch_timeout_s)

    async def feed(enqueue: Callable[[str], object]) -> None:
        def changed(change: Change) -> None:
            enqueue(change.key)

        source = ModelCacheListWatch(client)
        subscriptions = [shared.informer(source, ns) for ns in settings.watched()]
        cluster.informers = [s.informer for s in subscriptions]
        await asyncio.gather(*(s.run(changed) for s in subscriptions))

    return ModelCacheController(reconciler.reconcile, feed, workers=workers)
