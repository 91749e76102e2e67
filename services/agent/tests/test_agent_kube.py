"""Kubernetes mode against the in-process fake apiserver: the agent patches its own Node."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from prometheus_client import CollectorRegistry

from flexinfer_agent.adapters.kube import NodeClient, NodeLabeler
from flexinfer_agent.core.discovery import Discovery
from flexinfer_agent.core.heartbeat import Heartbeat
from flexinfer_agent.core.sources.nvidia_smi import QUERY
from flexinfer_agent.metrics import AgentMetrics
from flexinfer_agent.settings import DiscoverySettings, KubeSettings
from flexinfer_common.testing.kube_apiserver import KubeApiServer
from flexinfer_common.testing.kube_apiserver.fixtures import kube_apiserver_fixture

apiserver = kube_apiserver_fixture()
P = "flexinfer.ai/"
OTHER_LABELS = {"kubernetes.io/hostname": "gpu-1", "nvidia.com/gpu.present": "true"}


def _node(server: KubeApiServer) -> None:
    server.create(
        "nodes",
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": "gpu-1",
                "labels": {**OTHER_LABELS, P + "gpu.int4": "stale"},
                "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
            },
        },
    )


def _heartbeat(
    server: KubeApiServer, tool: str, metrics: AgentMetrics
) -> tuple[Heartbeat, NodeLabeler, NodeClient]:
    client = NodeClient(KubeSettings(host=server.url))
    labeler = NodeLabeler(client, P)
    discovery = Discovery.from_settings(DiscoverySettings(sources=["nvidia-smi"], nvidia_smi=tool))
    heartbeat = Heartbeat(
        node="gpu-1", prefix=P, discovery=discovery, reporter=labeler, observer=metrics,
        interval_s=30,
    )  # fmt: skip
    return heartbeat, labeler, client


def _metadata(server: KubeApiServer) -> dict[str, dict[str, str]]:
    node = server.get("nodes", None, "gpu-1")
    assert node is not None
    return {k: node["metadata"].get(k, {}) for k in ("labels", "annotations")}


async def test_labels_its_node_then_removes_them_when_the_gpus_go(
    apiserver: KubeApiServer, fake_tool: Callable[..., str], tmp_path: Path
) -> None:
    _node(apiserver)
    tool = fake_tool("nvidia-smi", {" ".join(QUERY): "nvidia-smi/8x-h100.csv"})
    metrics = AgentMetrics(CollectorRegistry())
    heartbeat, labeler, client = _heartbeat(apiserver, tool, metrics)
    try:
        await heartbeat.beat()
        meta = _metadata(apiserver)
        assert meta["labels"][P + "gpu.count"] == "8"
        assert meta["labels"][P + "gpu.int4"] == "true"
        assert meta["labels"][P + "gpu.device-class"] == "nvidia-h100-80gb-hbm3"
        assert meta["annotations"][P + "gpu-free-memory"] == str(81004 * 5 + 40268 * 2 + 6130)
        assert {k: meta["labels"][k] for k in OTHER_LABELS} == OTHER_LABELS

        await heartbeat.beat()  # nothing changed: read, no write
        assert labeler.patches == 1
        assert apiserver.count("patch", "nodes") == 1

        fake_tool("nvidia-smi", {}, exit_code=6)  # the GPUs are gone (the driver fails)
        await heartbeat.beat()
        meta = _metadata(apiserver)
        assert meta["labels"] == {**OTHER_LABELS, P + "gpu-present": "false"}
        assert set(meta["annotations"]) == {"node.alpha.kubernetes.io/ttl", P + "agent-keys"}
        assert json.loads(meta["annotations"][P + "agent-keys"])["labels"] == [P + "gpu-present"]
    finally:
        await client.close()
    # The agent's ClusterRole grants nodes get and patch, nothing else.
    assert {(c.verb, c.resource) for c in apiserver.calls} == {("get", "nodes"), ("patch", "nodes")}


async def test_an_apiserver_error_is_counted_and_the_next_beat_delivers(
    apiserver: KubeApiServer, fake_tool: Callable[..., str]
) -> None:
    _node(apiserver)
    tool = fake_tool("nvidia-smi", {" ".join(QUERY): "nvidia-smi/l4.csv"})
    registry = CollectorRegistry()
    heartbeat, _labeler, client = _heartbeat(apiserver, tool, AgentMetrics(registry))
    try:
        apiserver.inject(500, verb="patch", resource="nodes")
        await heartbeat.beat()
        assert registry.get_sample_value("flexinfer_agent_report_errors_total") == 1
        await heartbeat.beat()
        assert _metadata(apiserver)["labels"][P + "gpu.device-class"] == "nvidia-l4"
    finally:
        await client.close()


async def test_a_node_that_does_not_exist_is_a_report_error(
    apiserver: KubeApiServer, fake_tool: Callable[..., str]
) -> None:
    tool = fake_tool("nvidia-smi", {" ".join(QUERY): "nvidia-smi/l4.csv"})
    registry = CollectorRegistry()
    heartbeat, _, client = _heartbeat(apiserver, tool, AgentMetrics(registry))
    try:
        await heartbeat.beat()
    finally:
        await client.close()
    assert registry.get_sample_value("flexinfer_agent_report_errors_total") == 1
