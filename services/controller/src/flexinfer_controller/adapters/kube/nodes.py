"""Nodes with GPUs: list and watch those the agent labelled (for detectGPU's inventory).

Only nodes carrying ``flexinfer.ai/gpu.vendor`` are listed, so the controller caches the
GPU nodes, never the whole cluster's.
"""

from __future__ import annotations

import functools
from typing import Any

from flexinfer_controller.adapters.kube.client import (
    KubeClient,
    Obj,
    WatchStream,
    list_json,
    watch_kwargs,
)

GPU_NODE_SELECTOR = "flexinfer.ai/gpu.vendor"
"""Nodes the agent labelled with a GPU vendor."""


class NodeListWatch:
    """List and watch of the nodes matching a label selector (cluster-scoped)."""

    kind = "Node"
    plural = "nodes"

    def __init__(self, client: KubeClient, label_selector: str = GPU_NODE_SELECTOR) -> None:
        self._client = client
        self._selector = label_selector

    async def list(self, namespace: str | None) -> tuple[list[Obj], str]:
        """The matching nodes (as dicts) and the list's resourceVersion."""
        return await list_json(self._client, "list nodes", self._lister())

    def watch(self, namespace: str | None, resource_version: str, timeout_s: int) -> WatchStream:
        """A watch of the matching nodes after ``resource_version``."""
        opener = functools.partial(
            self._lister(), watch=True, **watch_kwargs(resource_version, timeout_s)
        )
        return WatchStream(opener, "watch nodes")

    def _lister(self) -> Any:
        return functools.partial(self._client.core.list_node, label_selector=self._selector)
