"""Pods of the Models' engines: list and watch them (for the informer), patch and delete one.

Only pods with the engine labels the renderers put on every engine pod are listed, so the
controller never caches the cluster's other pods.
"""

from __future__ import annotations

from typing import Any

from flexinfer_common.kube.client import MERGE_PATCH, KubeClient, Obj
from flexinfer_common.kube.listwatch import CoreListWatch


class PodListWatch(CoreListWatch):
    """List and watch of the pods matching a label selector."""

    def __init__(self, client: KubeClient, label_selector: str) -> None:
        super().__init__(client, "pods", label_selector=label_selector)


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
