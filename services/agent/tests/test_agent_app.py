"""The node agent skeleton: health, metrics, settings and its command line."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import httpx
import pytest

from flexinfer_agent.__main__ import main
from flexinfer_agent.app import create_app
from flexinfer_agent.settings import AgentSettings
from flexinfer_common.serving import ServerGroup, bind_socket


async def test_health_and_metrics_over_asgi() -> None:
    app = create_app(AgentSettings(port=0))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://agent") as client:
        assert (await client.get("/healthz")).json() == {"status": "ok"}
        assert (await client.get("/readyz")).status_code == 200
        metrics = await client.get("/metrics")
        assert metrics.status_code == 200
        assert "# HELP" in metrics.text
        assert (await client.get("/labels")).status_code == 404


async def test_serves_on_a_real_socket() -> None:
    settings = AgentSettings(host="127.0.0.1", port=0)
    group = ServerGroup()
    app: Any = create_app(settings)
    url = group.add_app("agent", app, bind_socket(settings.host, settings.port))
    started = asyncio.Event()

    async def ready() -> None:
        started.set()

    task = asyncio.create_task(group.run(on_ready=ready))
    try:
        await asyncio.wait_for(started.wait(), 10)
        async with httpx.AsyncClient(base_url=url) as client:
            response = await client.get("/healthz")
        assert response.status_code == 200
        assert response.json() == {"status": "ok"}
    finally:
        group.stop()
        await asyncio.wait_for(task, 10)


def test_settings_defaults_and_env(monkeypatch: pytest.MonkeyPatch) -> None:
    assert AgentSettings().port == 9100
    monkeypatch.setenv("FLEXINFER_AGENT_PORT", "9999")
    monkeypatch.setenv("FLEXINFER_AGENT_HOST", "0.0.0.0")
    settings = AgentSettings()
    assert (settings.host, settings.port) == ("0.0.0.0", 9999)


def test_main_rejects_a_bad_port(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--port", "70000"]) == 2
    assert "port" in capsys.readouterr().err


def test_main_reports_a_busy_port(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        assert main(["--host", "127.0.0.1", "--port", str(port)]) == 1
    assert f"cannot listen on 127.0.0.1:{port}" in capsys.readouterr().err


def test_node_name_comes_from_the_downward_api(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODE_NAME", "gpu-node-7")
    assert AgentSettings().node_name == "gpu-node-7"
    monkeypatch.delenv("NODE_NAME")
    assert AgentSettings().node_name == socket.gethostname()
