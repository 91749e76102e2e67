"""GPUGroups (ai.flexinfer/v1alpha1) on Kubernetes: the GPUGroup loop's apiserver side.

``ApiServerGroupStatus`` writes a GPUGroup's status (status subresource, guarded by its
resourceVersion); ``GPUGroupInformerFeed`` follows GPUGroups in the watched namespaces
through the shared informers. RBAC: ``list`` and ``watch`` on ``gpugroups`` and ``patch`` on
``gpugroups/status`` (the controller never creates, edits or deletes one).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from flexinfer_common.api import API_GROUP, GPU_GROUP_KIND
from flexinfer_common.kube.client import KubeClient, Obj, Resource
from flexinfer_common.kube.informer import Change, Informer
from flexinfer_common.store import ModelStore
from flexinfer_controller.adapters.kube.objects import (
    CustomListWatch,
    CustomObjects,
    JsonPatch,
    version_guard,
)
from flexinfer_controller.adapters.kube.shared import SharedInformers
from flexinfer_controller.core.sharing.gpugroups import GPUGroupWiring
from flexinfer_controller.legacy.gpugroup.loop import GPUGroupLoop, WallClock

GPU_GROUPS = Resource(API_GROUP, "v1alpha1", "gpugroups", GPU_GROUP_KIND)


class ApiServerGroupStatus:
    """GPUGroup statuses through the status subresource (the loop's ``GroupStatusApi``)."""

    def __init__(self, client: KubeClient) -> None:
        self._groups = CustomObjects(client, GPU_GROUPS)

    async def write_group_status(
        self, namespace: str, name: str, resource_version: str, status: Obj
    ) -> None:
        """The whole status; ConflictError when the version is stale (the worker retries)."""
        ops: JsonPatch = [
            *version_guard(resource_version),
            {"op": "add", "path": "/status", "value": status},
        ]
        await self._groups.json_patch_status(namespace, name, ops)


class GPUGroupInformerFeed:
    """Every GPUGroup as stored, and every change (the loop's ``GroupFeed``)."""

    def __init__(
        self, client: KubeClient, namespaces: list[str | None], informers: SharedInformers
    ) -> None:
        self._client = client
        self._namespaces = namespaces
        self._shared = informers

    async def run(self, changed: Callable[[str, Obj | None], None]) -> None:
        """Follow GPUGroups in every watched namespace until cancelled."""
        source = CustomListWatch(self._client, GPU_GROUPS)
        shared = [self._shared.informer(source, ns) for ns in self._namespaces]
        informers: list[Informer[Obj]] = [s.informer for s in shared]

        def on_change(change: Change) -> None:
            found = next((f for i in informers if (f := i.get(change.key))), None)
            changed(change.key, None if change.type == "DELETED" else found)

        await asyncio.gather(*(s.run(on_change) for s in shared))


def gpugroup_loop(
    client: KubeClient,
    namespaces: list[str | None],
    informers: SharedInformers,
    store: ModelStore,
    wiring: GPUGroupWiring,
    requeue_model: Callable[[str], object],
) -> GPUGroupLoop | None:
    """The GPUGroup loop on ``client`` (None while no arbiter uses ``wiring``: sharing off)."""
    if wiring.arbiter is None or wiring.source is None or wiring.clock is None:
        return None
    return GPUGroupLoop(
        api=ApiServerGroupStatus(client),
        feed=GPUGroupInformerFeed(client, namespaces, informers),
        source=wiring.source,
        index=wiring.index,
        arbiter=wiring.arbiter,
        store=store,
        requeue_model=requeue_model,
        wall=WallClock(wiring.clock),
    )
