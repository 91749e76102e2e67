"""Nodes the agents report on the bus (core/nodes.py): alone, and a real agent process
beating over the real Redis into a local controller's placement."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from flexinfer_common.bus import create_bus
from flexinfer_common.bus.topics import NodeGPUGroup, NodeInventoryEvent
from flexinfer_common.settings import BusSettings
from flexinfer_controller.core.controller import Controller
from flexinfer_controller.core.gpu import DeclaredInventory, NodeGPU
from flexinfer_controller.core.nodes import FleetInventory, ReportedNodes
from flexinfer_controller.testing import eventually, fake_model_dir, model_doc, run_controller
from flexinfer_testing.fake_tools import fake_tool_maker
from flexinfer_testing.repo import repo_root
from flexinfer_testing.services import redis_prefix, require_redis
from flexinfer_testing.stack import stop_process

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


class Clock:
    def __init__(self, at: datetime) -> None:
        self.at = at

    def __call__(self) -> float:
        return self.at.timestamp()


def beat(
    node: str, at: datetime, *, count: int = 2, interval_s: float = 10.0
) -> NodeInventoryEvent:
    group = NodeGPUGroup(
        vendor="nvidia", count=count, arch="sm_89", vram="24Gi", device_class="nvidia-l4", int4=True
    )
    labels = {"flexinfer.ai/gpu.vendor": "NVIDIA", "flexinfer.ai/gpu.count": str(count)}
    return NodeInventoryEvent(
        node=node, at=at, interval_s=interval_s, gpus=[group], labels=labels, annotations={}
    )


def test_a_node_beating_is_in_the_fleet_until_three_intervals_pass() -> None:
    clock = Clock(T0)
    nodes = ReportedNodes(clock)
    assert nodes.observe(beat("box", T0))
    [gpu] = nodes.nodes()
    assert (gpu.node, gpu.vendor, gpu.count, gpu.arch, gpu.vram_mb) == (
        "box",
        "nvidia",
        2,
        "sm_89",
        24576,
    )
    assert gpu.labels["flexinfer.ai/gpu.vendor"] == "NVIDIA"
    clock.at = T0 + timedelta(seconds=30)
    assert nodes.nodes() != []  # three 10 s intervals: still there
    clock.at = T0 + timedelta(seconds=31)
    assert nodes.nodes() == []
    assert nodes.forget_stale() == ["box"]


def test_only_news_changes_the_fleet() -> None:
    clock = Clock(T0)
    nodes = ReportedNodes(clock)
    assert nodes.observe(beat("box", T0))
    clock.at = T0 + timedelta(seconds=10)
    assert not nodes.observe(beat("box", T0 + timedelta(seconds=10)))  # the same GPUs
    assert not nodes.observe(beat("box", T0 + timedelta(seconds=5), count=4))  # older: ignored
    assert nodes.observe(beat("box", T0 + timedelta(seconds=11), count=4))  # a GPU more
    assert [g.count for g in nodes.nodes()] == [4]


def test_a_replayed_heartbeat_of_a_dead_node_is_stale_on_arrival() -> None:
    clock = Clock(T0 + timedelta(hours=1))
    nodes = ReportedNodes(clock)
    assert not nodes.observe(beat("gone", T0))
    assert nodes.nodes() == []


def test_an_agent_clock_ahead_counts_from_arrival() -> None:
    clock = Clock(T0)
    nodes = ReportedNodes(clock)
    nodes.observe(beat("box", T0 + timedelta(hours=1)))
    clock.at = T0 + timedelta(seconds=31)
    assert nodes.nodes() == []


def test_a_reported_node_replaces_the_declared_one_of_its_name() -> None:
    clock = Clock(T0)
    reported = ReportedNodes(clock)
    declared = DeclaredInventory(
        [NodeGPU("box", "amd", 1, "gfx1100", 24576), NodeGPU("other", "amd", 1, "gfx1100", 24576)]
    )
    fleet = FleetInventory(declared, reported)
    assert [(n.node, n.vendor) for n in fleet.nodes() or []] == [("box", "amd"), ("other", "amd")]
    reported.observe(beat("box", T0))
    assert [(n.node, n.vendor) for n in fleet.nodes() or []] == [
        ("other", "amd"),
        ("box", "nvidia"),
    ]
    clock.at = T0 + timedelta(minutes=5)  # box stopped beating: the declaration is back
    assert [(n.node, n.vendor) for n in fleet.nodes() or []] == [("box", "amd"), ("other", "amd")]


# --- A real agent process, the real Redis, a local controller ----------------------------


@contextmanager
def agent_process(tmp_path: Path, env: dict[str, str]) -> Iterator[subprocess.Popen[bytes]]:
    """``python -m flexinfer_agent`` reporting on the bus; stopped when the block ends."""
    from flexinfer_agent.core.sources.nvidia_smi import QUERY

    fixtures = repo_root() / "services" / "agent" / "tests" / "fixtures"
    tool = fake_tool_maker(tmp_path / "bin", fixtures)(
        "nvidia-smi", {" ".join(QUERY): "nvidia-smi/l4.csv"}
    )
    log = (tmp_path / "agent.log").open("ab")
    settings = {
        "FLEXINFER_AGENT_REPORT": "bus",
        "FLEXINFER_AGENT_NODE_NAME": "gpu-box",
        "FLEXINFER_AGENT_PORT": "0",
        "FLEXINFER_AGENT_HEARTBEAT_INTERVAL_S": "1",
        "FLEXINFER_AGENT_DISCOVERY_SOURCES": '["nvidia-smi"]',
        "FLEXINFER_AGENT_DISCOVERY_NVIDIA_SMI": tool,
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "flexinfer_agent"],
        env={**os.environ, **env, **settings},
        stdout=log,
        stderr=log,
        stdin=subprocess.DEVNULL,
    )
    log.close()
    try:
        yield proc
    finally:
        stop_process(proc)


def schedulable(model: Any) -> tuple[str, str]:
    cond = {c.type: c for c in model.status.conditions}["Schedulable"]
    return cond.reason, cond.message


@pytest.mark.redis
async def test_an_agents_heartbeats_place_models_and_its_silence_removes_its_gpus(
    tmp_path: Path,
) -> None:
    url = require_redis()
    source = fake_model_dir(tmp_path / "m").as_uri()
    async with redis_prefix() as prefix:
        bus = create_bus(BusSettings(url=url, stream_prefix=prefix))
        env = {"FLEXINFER_BUS_URL": url, "FLEXINFER_BUS_STREAM_PREFIX": prefix}
        try:
            async with run_controller(tmp_path, bus=bus) as h:
                controller: Controller = h.app.state.controller
                doc = model_doc("small", source, minReplicas=1)
                doc["spec"]["gpu"] = {"vendor": "nvidia", "vramEstimateMB": 8000}
                await h.put_model(doc)
                # No GPU is known yet: it waits, and is placed when the agent's first
                # heartbeat arrives (not 30 s later).
                await h.wait_phase("small", "Pending")
                with agent_process(tmp_path, env) as agent:
                    ready = await h.wait_phase("small", "Ready", timeout_s=20)
                    gpu = ready.status.gpu
                    assert gpu is not None
                    assert (gpu.node, gpu.device, gpu.architecture, gpu.memory_mb) == (
                        "gpu-box",
                        "0",
                        "sm_89",
                        22528,  # the agent labels the L4's 23034 MiB as 22Gi
                    )
                    big = model_doc("big", source, minReplicas=1)
                    big["spec"]["gpu"] = {"vendor": "nvidia", "vramEstimateMB": 30000}
                    await h.put_model(big)
                    pending = await h.wait_phase("big", "Pending")
                    reason, message = schedulable(pending)
                    assert reason == "VRAMInsufficient"
                    assert "gpu 0 on gpu-box: Insufficient VRAM" in message
                    assert agent.poll() is None
                # The agent is gone: after three missed heartbeats its GPUs leave the fleet.
                await eventually(lambda: controller.reported.nodes() == [], timeout_s=15)
                late = model_doc("late", source, minReplicas=1)
                late["spec"]["gpu"] = {"vendor": "nvidia"}
                await h.put_model(late)
                gone = await h.wait_phase("late", "Pending")
                assert schedulable(gone)[0] == "NoMatchingGPU"
        finally:
            await bus.close()
