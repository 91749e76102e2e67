"""Local mode: each heartbeat is a NodeInventoryEvent on ``flexinfer.nodes``."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

from prometheus_client import CollectorRegistry

from flexinfer_agent.adapters.bus import BusReporter
from flexinfer_agent.core.discovery import Discovery
from flexinfer_agent.core.heartbeat import Heartbeat
from flexinfer_agent.core.sources.nvidia_smi import LIST, QUERY
from flexinfer_agent.metrics import AgentMetrics
from flexinfer_agent.settings import DiscoverySettings
from flexinfer_common.bus.memory import MemoryBus
from flexinfer_common.bus.topics import NODES, NodeInventoryEvent

AT = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


async def test_a_heartbeat_is_published_for_the_controller(fake_tool: Callable[..., str]) -> None:
    tool = fake_tool(
        "nvidia-smi",
        {" ".join(QUERY): "nvidia-smi/a100-mig.csv", " ".join(LIST): "nvidia-smi/a100-mig-L.txt"},
    )
    bus = MemoryBus()
    consumer = bus.consumer(NODES, "controller", "c1", from_start=True)
    heartbeat = Heartbeat(
        node="box-1",
        prefix="flexinfer.ai/",
        discovery=Discovery.from_settings(
            DiscoverySettings(sources=["nvidia-smi"], nvidia_smi=tool)
        ),
        reporter=BusReporter(bus, 15.0),
        observer=AgentMetrics(CollectorRegistry()),
        interval_s=15.0,
        clock=lambda: AT,
    )
    await heartbeat.beat()
    [message] = await consumer.fetch(timeout_s=5)
    event = NodeInventoryEvent.model_validate(message.payload)
    assert (event.node, event.at, event.interval_s, event.source) == (
        "box-1", AT, 15.0, "nvidia-smi",
    )  # fmt: skip
    assert [(g.device_class, g.count, g.vram, g.free_mib) for g in event.gpus] == [
        ("nvidia-a100-sxm4-80gb-mig-3g.40gb", 1, "40Gi", None),
        ("nvidia-a100-sxm4-80gb-mig-2g.20gb", 1, "20Gi", None),
        ("nvidia-a100-sxm4-80gb-mig-1g.10gb", 1, "10Gi", None),
        ("nvidia-a100-sxm4-80gb", 1, "80Gi", 81050),
    ]
    assert event.gpus[0].vendor == "nvidia"
    assert event.gpus[0].arch == "sm_80"
    assert event.labels["flexinfer.ai/gpu.count"] == "4"
    await bus.close()
