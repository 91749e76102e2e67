"""The node agent app and command line: health, metrics, settings, ``--print``."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from flexinfer_agent.__main__ import main
from flexinfer_agent.app import create_app
from flexinfer_agent.core.sources.nvidia_smi import LIST, QUERY
from flexinfer_agent.core.sources.rocm_smi import ARGS as ROCM_ARGS
from flexinfer_agent.settings import AgentSettings, DiscoverySettings
from flexinfer_common.lifespan import AppLifespan
from flexinfer_testing import skeleton


async def test_health_and_metrics_over_asgi() -> None:
    app = create_app(AgentSettings(port=0))
    await skeleton.check_health_and_metrics(app, unknown_path="/labels")


async def test_serves_on_a_real_socket() -> None:
    settings = AgentSettings(host="127.0.0.1", port=0)
    await skeleton.check_serves_on_a_real_socket(create_app(settings), settings)


def test_settings_defaults_and_env(monkeypatch: pytest.MonkeyPatch) -> None:
    skeleton.check_settings_env(
        AgentSettings, env_prefix="FLEXINFER_AGENT_", default_port=9100, monkeypatch=monkeypatch
    )


def test_main_rejects_a_bad_port(capsys: pytest.CaptureFixture[str]) -> None:
    skeleton.check_main_rejects_a_bad_port(main, capsys)


def test_main_reports_a_busy_port(capsys: pytest.CaptureFixture[str]) -> None:
    skeleton.check_main_reports_a_busy_port(main, capsys)


def test_node_name_comes_from_the_downward_api(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODE_NAME", "gpu-node-7")
    assert AgentSettings().node_name == "gpu-node-7"
    monkeypatch.delenv("NODE_NAME")
    assert AgentSettings().node_name == socket.gethostname()


def test_main_refuses_an_open_api_beyond_loopback() -> None:
    skeleton.check_main_refuses_an_open_api("flexinfer_agent", env_prefix="FLEXINFER_AGENT_")


async def test_metrics_show_each_gpu_and_the_discovery_errors(
    fake_tool: Callable[..., str], tmp_path: Path
) -> None:
    tool = fake_tool("rocm-smi", {" ".join(ROCM_ARGS): "rocm-smi/8x-mi300x.json"})
    settings = AgentSettings(
        port=0,
        report="none",
        discovery=DiscoverySettings(
            sources=["nvidia-smi", "rocm-smi"], nvidia_smi=str(tmp_path / "none"), rocm_smi=tool
        ),
    )
    app = create_app(settings)
    lifespan = AppLifespan("agent", app)
    await lifespan.startup()
    try:
        # The lifespan's own first beat may still be running: one more, awaited, settles it.
        await app.state.heartbeat.beat()
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://agent"
        ) as client:
            text = (await client.get("/metrics")).text
    finally:
        await lifespan.shutdown()
    assert "flexinfer_agent_gpus 8.0" in text
    # One count per heartbeat that tried the missing tool (the lifespan's and ours).
    assert 'flexinfer_agent_discovery_errors_total{reason="missing",source="nvidia-smi"}' in text
    assert text.count("flexinfer_agent_gpu_memory_total_bytes{") == 8
    assert 'device_class="amd-instinct-mi300x"' in text
    assert text.count("flexinfer_agent_gpu_memory_free_bytes{") == 8


def test_once_print_shows_the_node(
    fake_tool: Callable[..., str], tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    # The real subprocess path: the tool paths are settings, the tools print fixtures.
    tool = fake_tool(
        "nvidia-smi",
        {" ".join(QUERY): "nvidia-smi/a100-mig.csv", " ".join(LIST): "nvidia-smi/a100-mig-L.txt"},
    )
    monkeypatch.setenv("FLEXINFER_AGENT_DISCOVERY_NVIDIA_SMI", tool)
    monkeypatch.setenv("FLEXINFER_AGENT_DISCOVERY_NVML_MODULE", "absent_nvml")
    assert main(["--print", "--node-name", "gpu-9"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert (shown["node"], shown["source"]) == ("gpu-9", "nvidia-smi")
    assert [g["mig_profile"] for g in shown["gpus"]] == ["3g.40gb", "2g.20gb", "1g.10gb", None]
    assert shown["errors"][0] == {
        "source": "nvml", "reason": "missing", "message": "nvml: absent_nvml is not installed",
    }  # fmt: skip
    assert shown["labels"]["flexinfer.ai/gpu.count"] == "4"
    assert shown["labels"]["flexinfer.ai/gpu.vram"] == "10Gi"


def test_once_on_a_node_without_gpus_still_succeeds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--print", "--node-name", "cpu-1"]
    with pytest.MonkeyPatch.context() as env:
        env.setenv("FLEXINFER_AGENT_DISCOVERY_SOURCES", '["drm"]')
        env.setenv("FLEXINFER_AGENT_DISCOVERY_DRM_ROOT", str(tmp_path))
        assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["labels"] == {"flexinfer.ai/gpu-present": "false"}


def test_an_unknown_source_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.MonkeyPatch.context() as env:
        env.setenv("FLEXINFER_AGENT_DISCOVERY_SOURCES", '["cuda"]')
        assert main(["--print"]) == 2
    assert "unknown source 'cuda'" in capsys.readouterr().err
