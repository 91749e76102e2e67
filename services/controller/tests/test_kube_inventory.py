"""detectGPU on Kubernetes: the nodes' flexinfer.ai/gpu.* labels, watched, are the fleet."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from flexinfer_common.bus.memory import MemoryBus
from flexinfer_common.kube.client import KubeClient
from flexinfer_common.serving import serve_in_background
from flexinfer_common.testing.kube_apiserver import KubeApiServer, find_crd_dir
from flexinfer_common.testing.kube_apiserver.fixtures import kube_apiserver_fixture
from flexinfer_controller.app import create_app
from flexinfer_controller.core.gpu import NodeGPU
from flexinfer_controller.kube_settings import KubernetesSettings
from flexinfer_controller.runtime.kubernetes.factory import kubernetes_models
from flexinfer_controller.runtime.kubernetes.inventory import NodeInventory
from flexinfer_controller.settings import ControllerSettings
from flexinfer_controller.testing import eventually

apiserver = kube_apiserver_fixture([find_crd_dir(Path(__file__))])


def node(name: str, **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {f"flexinfer.ai/gpu.{k}": v for k, v in labels.items()},
        },
    }


async def test_the_inventory_follows_the_labelled_nodes(apiserver: KubeApiServer) -> None:
    apiserver.create("nodes", node("gpu-a", vendor="NVIDIA", arch="sm_89", vram="24Gi", count="2"))
    apiserver.create("nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "cpu-1"}})
    client = KubeClient(apiserver.url)
    inventory = NodeInventory(client, watch_timeout_s=5)
    assert inventory.nodes() is None  # nothing known before the first list
    task = asyncio.create_task(inventory.informer.run())
    try:
        await eventually(lambda: inventory.nodes() is not None)
        assert inventory.nodes() == [NodeGPU("gpu-a", "nvidia", 2, "sm_89", 24576)]
        apiserver.create("nodes", node("gpu-b", vendor="AMD", arch="gfx942"))
        await eventually(lambda: len(inventory.nodes() or []) == 2)
        assert NodeGPU("gpu-b", "amd", 1, "gfx942", None) in (inventory.nodes() or [])
        apiserver.delete("nodes", None, "gpu-a")
        await eventually(lambda: [n.node for n in inventory.nodes() or []] == ["gpu-b"])
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await client.close()


async def test_an_ambiguous_cluster_keeps_an_auto_model_pending(apiserver: KubeApiServer) -> None:
    apiserver.create("nodes", node("gpu-a", vendor="NVIDIA", arch="sm_89", vram="24Gi"))
    apiserver.create("nodes", node("gpu-b", vendor="AMD", arch="gfx942", vram="192Gi"))
    body = {
        "apiVersion": "ai.flexinfer/v1alpha2",
        "kind": "Model",
        "metadata": {"name": "tiny", "namespace": "default"},
        "spec": {
            "backend": "reference",
            "source": "file:///models/tiny",
            "gpu": {"vendor": "auto"},
        },
    }
    apiserver.create("models", body)
    settings = ControllerSettings(
        port=0,
        runtime="kubernetes",
        data_dir=Path("/nonexistent/flexinfer"),
        kubernetes=KubernetesSettings(host=apiserver.url, namespaces=["default"]),
    )

    def status() -> dict[str, Any]:
        found = apiserver.get("models", "default", "tiny") or {}
        return dict(found.get("status") or {})

    bus = MemoryBus()
    async with kubernetes_models(settings) as (store, feed):
        app = create_app(settings, bus=bus, store=store, feed=feed)
        async with serve_in_background(app):
            await eventually(lambda: status().get("phase") == "Pending", timeout_s=15)
            schedulable = {c["type"]: c for c in status()["conditions"]}["Schedulable"]
            assert (schedulable["status"], schedulable["reason"]) == ("False", "AmbiguousGPUVendor")

            apiserver.patch("models", "default", "tiny", {"spec": {"gpu": {"vendor": "amd"}}})
            await eventually(lambda: (status().get("gpu") or {}).get("node") == "gpu-b", 15)
    await bus.close()
