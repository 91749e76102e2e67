"""Nodes with GPUs: list and watch those the agent labelled (for detectGPU's inventory).

Only nodes carrying ``flexinfer.ai/gpu.vendor`` are listed, so the controller caches the
GPU nodes, never the whole cluster's.
"""

from __future__ import annotations

from flexinfer_common.kube.client import KubeClient
from flexinfer_common.kube.listwatch import CoreListWatch

GPU_NODE_SELECTOR = "flexinfer.ai/gpu.vendor"
"""Nodes the agent labelled with a GPU vendor."""


class NodeListWatch(CoreListWatch):
    """List and watch of the nodes matching a label selector (cluster-scoped)."""

    def __init__(self, client: KubeClient, label_selector: str = GPU_NODE_SELECTOR) -> None:
        super().__init__(client, "nodes", label_selector=label_selector)
