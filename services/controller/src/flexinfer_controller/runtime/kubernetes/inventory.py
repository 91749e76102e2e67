"""detectGPU's fleet on Kubernetes: the GPU nodes' ``flexinfer.ai/gpu.*`` labels, watched."""

from __future__ import annotations

from flexinfer_common.kube.client import KubeClient
from flexinfer_common.kube.informer import Change, Informer
from flexinfer_controller.adapters.kube.nodes import NodeListWatch
from flexinfer_controller.core.gpu import NodeGPU, node_gpu


class NodeInventory:
    """The labelled nodes as an informer last saw them; unknown (None) until it listed."""

    def __init__(self, client: KubeClient, watch_timeout_s: int = 300) -> None:
        self.informer = Informer(
            NodeListWatch(client), self._changed, watch_timeout_s=watch_timeout_s
        )

    def nodes(self) -> list[NodeGPU] | None:
        """Every labelled node's GPUs; None before the first list (nothing is known yet)."""
        if not self.informer.synced.is_set():
            return None
        found = []
        for key in self.informer.keys():  # noqa: SIM118 (an Informer, not a dict)
            obj = self.informer.get(key)
            if obj is None:
                continue
            meta = obj.get("metadata") or {}
            gpu = node_gpu(str(meta.get("name", "")), meta.get("labels") or {})
            if gpu is not None:
                found.append(gpu)
        return found

    def labels(self, node: str | None) -> dict[str, str] | None:
        """Node ``node``'s labels as last seen; None: not known (or not listed yet)."""
        found = self.informer.get(f"/{node}") if node else None
        if found is None:
            return None
        return dict((found.get("metadata") or {}).get("labels") or {})

    def _changed(self, change: Change) -> None:
        # Placement is read at each reconcile (and unplaced Models are requeued in 30 s):
        # a node change needs no event of its own.
        return None
