"""Pods of the Models' engines: list and watch them (for the informer), patch and delete one.

Only pods with the engine labels the renderers put on every engine pod are listed, so the
controller never caches the cluster's other pods.
"""

from __future__ import annotations

import functools
from typing import Any

from flexinfer_controller.adapters.kube.client import (
    MERGE_PATCH,
    KubeClient,
    Obj,
    WatchStream,
    list_json,
    watch_kwargs,
)


class PodListWatch:
    """List and watch of the pods matching a label selector."""

    kind = "Pod"
    plural = "pods"

    def __init__(self, client: KubeClient, label_selector: str) -> None:
        self._client = client
        self._selector = label_selector

    async def list(self, namespace: str | None) -> tuple[list[Obj], str]:
        """The matching pods (as dicts) and the list's resourceVersion."""
        return await list_json(self._client, "list pods", self._lister(namespace))

    def watch(self, namespace: str | None, resource_version: str, timeout_s: int) -> WatchStream:
        """A watch of the matching pods after ``resource_version``."""
        opener = functools.partial(
            self._lister(namespace), watch=True, **watch_kwargs(resource_version, timeout_s)
        )
        return WatchStream(opener, "watch pods")

    def _lister(self, namespace: str | None) -> Any:
        core = self._client.core
        if namespace is None:
            return functools.partial(
                core.list_pod_for_all_namespaces, label_selector=self._selector
            )
        return functools.partial(core.list_namespaced_pod, namespace, label_selector=self._selector)


async def patch_pod(client: KubeClient, namespace: str, name: str, patch: Obj) -> None:
    """A JSON merge patch of one pod (its metadata: the deletion cost)."""
    core = client.core

    def send(**kwargs: Any) -> None:
        # Untyped: the typed Pod model refuses statuses some kubelets write partially.
        response = core.patch_namespaced_pod(
            name, namespace, patch, _content_type=MERGE_PATCH, _preload_content=False, **kwargs
        )
        try:
            response.data  # read whole, so the pooled connection can be reused  # noqa: B018
        finally:
            response.release_conn()

    await client.call("patch pods", send)


async def delete_pod(client: KubeClient, namespace: str, name: str, uid: str) -> None:
    """Delete one pod, only while the name still holds the pod ``uid`` names (409 if not)."""
    core = client.core
    options = {"preconditions": {"uid": uid}} if uid else {}

    def send(**kwargs: Any) -> None:
        response = core.delete_namespaced_pod(
            name, namespace, body=options, _preload_content=False, **kwargs
        )
        try:
            response.data  # read whole, so the pooled connection can be reused  # noqa: B018
        finally:
            response.release_conn()

    await client.call("delete pods", send)
