"""The node agent skeleton: health, metrics, settings and its command line."""

from __future__ import annotations

import socket

import pytest

from flexinfer_agent.__main__ import main
from flexinfer_agent.app import create_app
from flexinfer_agent.settings import AgentSettings
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
