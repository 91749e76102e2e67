"""The apiserver as the proxy's ``QueueSink`` (the seed's ``signalGPUGroupDemand``).

A Model a GPUGroup lists (a v1alpha1 ModelDeployment's, by namespace/name) gets its queue
as annotations on that GPUGroup, ``flexinfer.ai/queue.<model>`` = depth and
``flexinfer.ai/queue-since.<model>`` = RFC3339, both removed when the queue empties (one
JSON merge patch, which leaves the other Models' annotations alone). Any other Model gets
``status.lastActiveTime`` = now while requests wait (a merge patch of that one field through
the status subresource; the controller keeps the later of it and what it noted itself).

Which GPUGroup lists a Model is read from a list of every GPUGroup, kept ``groups_ttl_s``
(a queue starts rarely; no watch is held for it). RBAC: ``list`` and ``patch`` on
``gpugroups``, ``patch`` on ``models/status`` (k8s/base/rbac.yaml).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, cast

from flexinfer_common.api import API_GROUP, GPU_GROUP_KIND
from flexinfer_common.errors import FlexInferError
from flexinfer_common.kube.client import KubeClient, Obj, Resource
from flexinfer_proxy.core.queue_mirror import QueueState

GPU_GROUPS = Resource(API_GROUP, "v1alpha1", "gpugroups", GPU_GROUP_KIND)
MODELS = Resource(API_GROUP, "v1alpha2", "models", "Model")
MERGE_PATCH = "application/merge-patch+json"
QUEUE_ANNOTATION = "flexinfer.ai/queue."
QUEUE_SINCE_ANNOTATION = "flexinfer.ai/queue-since."


def rfc3339(at: datetime) -> str:
    """``at`` in UTC, whole seconds, as Kubernetes writes times."""
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def listing(groups: list[Obj], model: str) -> tuple[str, str, str] | None:
    """(namespace, name) of the first GPUGroup (by namespace/name) listing Model ``model``,
    and the member's name."""
    found = []
    for group in groups:
        meta = group.get("metadata") or {}
        namespace = meta.get("namespace", "")
        for member in (group.get("spec") or {}).get("models") or []:
            if f"{member.get('namespace') or namespace}/{member.get('name')}" == model:
                found.append((namespace, str(meta.get("name")), str(member.get("name"))))
    return min(found) if found else None


class ApiServerQueueSink:
    """Queue states as GPUGroup annotations or a Model's ``status.lastActiveTime``."""

    def __init__(
        self,
        client: KubeClient,
        groups_ttl_s: float,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._client = client
        self._ttl_s = groups_ttl_s
        self._now = now
        self._groups: tuple[float, list[Obj]] | None = None

    async def write(self, model: str, state: QueueState) -> None:
        """Patch the GPUGroup listing ``model``, else bump the Model's lastActiveTime."""
        try:
            found = listing(await self._list_groups(), model)
            if found is not None:
                await self._annotate(found, state)
            elif state.depth > 0:
                namespace, _, name = model.partition("/")
                status = {"status": {"lastActiveTime": rfc3339(self._now())}}
                await self._patch(MODELS, namespace, name, status, status_only=True)
        except FlexInferError:
            self._groups = None  # a group gone or changed: list again next time
            raise

    async def aclose(self) -> None:
        """Close the client."""
        await self._client.close()

    async def _annotate(self, found: tuple[str, str, str], state: QueueState) -> None:
        namespace, group, member = found
        depth = str(state.depth) if state.depth > 0 else None
        since = rfc3339(state.since) if state.since is not None and depth else None
        annotations = {QUEUE_ANNOTATION + member: depth, QUEUE_SINCE_ANNOTATION + member: since}
        await self._patch(GPU_GROUPS, namespace, group, {"metadata": {"annotations": annotations}})

    async def _list_groups(self) -> list[Obj]:
        now = time.monotonic()
        if self._groups is not None and now - self._groups[0] < self._ttl_s:
            return self._groups[1]
        r, custom = GPU_GROUPS, self._client.custom
        listed = await self._client.call(
            "list gpugroups", custom.list_cluster_custom_object, r.group, r.version, r.plural
        )
        items = cast(list[Obj], cast(dict[str, Any], listed).get("items") or [])
        self._groups = (now, items)
        return items

    async def _patch(
        self, r: Resource, namespace: str, name: str, body: Obj, *, status_only: bool = False
    ) -> None:
        custom = self._client.custom
        fn = (
            custom.patch_namespaced_custom_object_status
            if status_only
            else custom.patch_namespaced_custom_object
        )
        what = f"patch {r.plural}{'/status' if status_only else ''}"
        args = (r.group, r.version, namespace, r.plural, name, body)
        await self._client.call(what, fn, *args, _content_type=MERGE_PATCH)
