"""Nodes with GPUs: list and watch those the agent labelled (for detectGPU's inventory).

Only nodes carrying ``flexinfer.ai/gpu.vendor`` are listed, so the controller caches the
GPU nodes, never the whole cluster's.
"""

from __future__ import annotations

import functools
import json
from typing import Any, cast

from flexinfer_controller.adapters.kube.client import KubeClient, Obj, WatchStream, watch_kwargs

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
        lister = self._lister()

        def raw(**kwargs: Any) -> Any:
            # As JSON: the typed models refuse node statuses some kubelets write partially.
            response = lister(_preload_content=False, **kwargs)
            try:
                return json.loads(response.data)
            finally:
                response.release_conn()

        body = cast(dict[str, Any], await self._client.call("list nodes", raw))
        items = cast(list[Obj], body.get("items") or [])
        return items, str(body["metadata"]["resourceVersion"])

    def watch(self, namespace: str | None, resource_version: str, timeout_s: int) -> WatchStream:
        """A watch of the matching nodes after ``resource_version``."""
        opener = functools.partial(
            self._lister(), watch=True, **watch_kwargs(resource_version, timeout_s)
        )
        return WatchStream(opener, "watch nodes")

    def _lister(self) -> Any:
        return functools.partial(self._client.core.list_node, label_selector=self._selector)
