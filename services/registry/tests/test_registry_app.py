"""The registry skeleton: HTTP health, gRPC health and ping over real channels, its CLI."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc
import httpx
import pytest
from grpc_health.v1 import health_pb2 as std_health_pb2
from grpc_health.v1 import health_pb2_grpc as std_health_grpc

from flexinfer_common.serving import serve_in_background
from flexinfer_registry.__main__ import main
from flexinfer_registry._generated.model_express import (
    api_pb2,
    api_pb2_grpc,
    health_pb2,
    health_pb2_grpc,
)
from flexinfer_registry.app import create_app
from flexinfer_registry.core.info import ServerInfo
from flexinfer_registry.settings import RegistrySettings
from flexinfer_testing.skeleton import busy_port


@pytest.fixture
async def registry() -> AsyncIterator[tuple[str, str]]:
    """A registry on real sockets (HTTP and gRPC on free ports): (http url, grpc address)."""
    settings = RegistrySettings(host="127.0.0.1", port=0, grpc_host="127.0.0.1", grpc_port=0)
    app: Any = create_app(settings)
    async with serve_in_background(app, settings.host) as url:
        yield url, str(app.state.grpc_address)


async def test_http_health_and_metrics(registry: tuple[str, str]) -> None:
    url, _ = registry
    async with httpx.AsyncClient(base_url=url) as client:
        assert (await client.get("/healthz")).json() == {"status": "ok"}
        assert (await client.get("/readyz")).status_code == 200
        assert "# HELP" in (await client.get("/metrics")).text


async def test_grpc_address_is_bound(registry: tuple[str, str]) -> None:
    _, address = registry
    host, port = address.rsplit(":", 1)
    assert host == "127.0.0.1"
    assert int(port) > 0


async def test_standard_grpc_health_reports_serving(registry: tuple[str, str]) -> None:
    _, address = registry
    async with grpc.aio.insecure_channel(address) as channel:
        stub = std_health_grpc.HealthStub(channel)
        for service in ("", "model_express.api.ApiService"):
            reply = await stub.Check(std_health_pb2.HealthCheckRequest(service=service))
            assert reply.status == std_health_pb2.HealthCheckResponse.SERVING
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.Check(std_health_pb2.HealthCheckRequest(service="no.such.Service"))
        assert caught.value.code() == grpc.StatusCode.NOT_FOUND


async def test_model_express_health_and_ping(registry: tuple[str, str]) -> None:
    _, address = registry
    async with grpc.aio.insecure_channel(address) as channel:
        # The generated stubs are untyped (protoc emits no typing for the gRPC classes).
        health_stub = health_pb2_grpc.HealthServiceStub(channel)  # type: ignore[no-untyped-call]
        health = await health_stub.GetHealth(health_pb2.HealthRequest())
        assert health.status == "ok"
        assert health.version
        api = api_pb2_grpc.ApiServiceStub(channel)  # type: ignore[no-untyped-call]
        pong = await api.SendRequest(api_pb2.ApiRequest(id="1", action="ping"))
        assert pong.success
        assert pong.data == b"pong"
        assert not pong.HasField("error")
        bad = await api.SendRequest(api_pb2.ApiRequest(id="2", action="\x00" * 10_000))
        assert not bad.success
        assert not bad.HasField("data")
        assert "unknown action" in bad.error
        assert len(bad.error) < 200


def test_server_info_answers() -> None:
    info = ServerInfo(version="1.2.3", started=0.0)
    assert info.answer("ping", None).data == b"pong"
    assert info.answer("ping", b"x").success
    assert info.answer("PING", None).success is False
    assert info.uptime_seconds() >= 0


def test_settings_defaults_and_env(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = RegistrySettings()
    assert (settings.port, settings.grpc_port) == (8011, 8001)
    monkeypatch.setenv("FLEXINFER_REGISTRY_GRPC_PORT", "9001")
    assert RegistrySettings().grpc_port == 9001


def test_main_rejects_a_bad_port(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--grpc-port", "-1"]) == 2
    assert "grpc_port" in capsys.readouterr().err


def test_main_reports_a_busy_grpc_port(capsys: pytest.CaptureFixture[str]) -> None:
    with busy_port() as port:
        rc = main(["--host", "127.0.0.1", "--port", "0", "--grpc-port", str(port)])
    assert rc == 1
    # The lifespan's own error, as one line: no "see the log above" for a traceback.
    err = capsys.readouterr().err
    assert f"flexinfer-registry: cannot listen for gRPC on 127.0.0.1:{port}" in err
    assert "Traceback" not in err
