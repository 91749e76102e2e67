"""The fetch token scope over real gRPC calls: it opens exactly the three ModelService calls
a download Job's registry client makes, and is PERMISSION_DENIED on every other method the
registry serves (enumerated from the service descriptors, so a new RPC is not opened
silently); the admin token still opens everything, and the P2P token cannot download."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import httpx
import modelexpress.model_pb2 as mx_model
import modelexpress.model_pb2_grpc as mx_model_grpc
import modelexpress.p2p_pb2 as mx_p2p
import pytest
from grpc_health.v1 import health_pb2 as std_health
from pydantic import SecretStr

from flexinfer_common.errors import ConfigError
from flexinfer_registry._generated.model_express import api_pb2 as mx_api
from flexinfer_registry._generated.model_express import health_pb2 as mx_health
from flexinfer_registry.app import create_app
from flexinfer_registry.client.mx_cli import TOKEN_ENV, run
from flexinfer_registry.client.mx_output import Output
from flexinfer_registry.server.grpc_auth import DENIED_DETAILS, OPEN_PREFIXES, Scope
from flexinfer_registry.settings import RegistrySettings
from flexinfer_registry.testing.served import ServedRegistry, bearer, served_registry, token_file

ADMIN = "admin-token-0123456789abcdef"
P2P = "p2p-token-0123456789abcdef"
FETCH = "fetch-token-0123456789abcdef"
ROTATED = "fetch-token-rotated-0123456789"
SECRETS = (ADMIN, P2P, FETCH, ROTATED)
FILES = {"config.json": b'{"x": 1}', "model.safetensors": b"w" * 70_000}

FETCH_METHODS = {
    "/model_express.model.ModelService/EnsureModelDownloaded",
    "/model_express.model.ModelService/ListModelFiles",
    "/model_express.model.ModelService/StreamModelFiles",
}
"""What the download Jobs call (mx_cli ``model download --cache-dir``), written out here so
that opening another method to the fetch scope fails this test until it is added."""
DESCRIPTORS = [mx_model.DESCRIPTOR, mx_p2p.DESCRIPTOR, mx_api.DESCRIPTOR, mx_health.DESCRIPTOR,
               std_health.DESCRIPTOR]  # fmt: skip
NOT_SERVED = {"model_express.p2p.WorkerService"}
"""An engine's service (the P2P transfer's worker side); the registry does not serve it."""


@dataclass(frozen=True)
class Method:
    path: str
    streaming: bool


def served_methods() -> list[Method]:
    """Every method of every service in the registry's protos that the registry serves."""
    methods = []
    for descriptor in DESCRIPTORS:
        for service in descriptor.services_by_name.values():
            if service.full_name in NOT_SERVED:
                continue
            for method in service.methods:
                path = f"/{service.full_name}/{method.name}"
                methods.append(Method(path, method.server_streaming))
    return methods


@pytest.fixture
async def registry(tmp_path: Path) -> AsyncIterator[ServedRegistry]:
    """A registry with admin, P2P and fetch tokens, and a fetch token file (rotation)."""
    rotation = token_file(tmp_path / "fetch-tokens", ROTATED)
    settings = RegistrySettings(
        port=0,
        grpc_port=0,
        cache_dir=tmp_path / "cache",
        auth_token=SecretStr(ADMIN),
        p2p_token=SecretStr(P2P),
        fetch_token=SecretStr(FETCH),
        fetch_token_file=rotation,
    )
    async with served_registry(settings, FILES) as served:
        yield served


async def _call(
    channel: grpc.aio.Channel, method: Method, token: str
) -> tuple[grpc.StatusCode, str]:
    """``method`` with an empty request (valid for every message), read to the end: its
    status code and details (checked to carry no token)."""
    kind = channel.unary_stream if method.streaming else channel.unary_unary
    call = kind(method.path)(b"", metadata=bearer(token), timeout=10)
    try:
        if method.streaming:
            async for _ in call:
                pass
        else:
            await call
    except grpc.aio.AioRpcError as exc:
        details = exc.details() or ""
        for secret in SECRETS:
            assert secret not in details
        return exc.code(), details
    return grpc.StatusCode.OK, ""


def _job_download(server: str, cache_dir: Path, log: Path) -> tuple[int, str, str]:
    """What a download Job runs (jobs.prefetch_container and the ModelCache Job's
    --termination-log), with the token in the client's variable as the Job has it."""
    out, err = io.StringIO(), io.StringIO()
    argv = ["--server", server, "--output", "json", "model", "download", "org/model",
            "--strategy", "SmartFallback", "--cache-dir", str(cache_dir),
            "--termination-log", str(log)]  # fmt: skip
    code = run(argv, Output(stdout=out, stderr=err))
    return code, out.getvalue(), err.getvalue()


def test_the_service_descriptors_are_all_known() -> None:
    """A new service in the protos must be placed: served (then scoped) or not."""
    services = {s.full_name for d in DESCRIPTORS for s in d.services_by_name.values()}
    assert services - NOT_SERVED == {
        "model_express.model.ModelService",
        "model_express.p2p.P2pService",
        "model_express.api.ApiService",
        "model_express.health.HealthService",
        "grpc.health.v1.Health",
    }
    assert {m.path for m in served_methods()} >= FETCH_METHODS


async def test_the_fetch_token_opens_exactly_the_download_jobs_methods(
    registry: ServedRegistry, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with grpc.aio.insecure_channel(registry.grpc_address) as channel:
        for method in served_methods():
            if method.path.startswith(OPEN_PREFIXES):
                continue  # probes are open to all (checked below)
            for token in (FETCH, ROTATED):
                code, details = await _call(channel, method, token)
                if method.path in FETCH_METHODS:
                    assert code not in (
                        grpc.StatusCode.PERMISSION_DENIED,
                        grpc.StatusCode.UNAUTHENTICATED,
                    ), method.path
                else:
                    assert code == grpc.StatusCode.PERMISSION_DENIED, method.path
                    assert details == DENIED_DETAILS[Scope.FETCH], method.path
                    assert "fetch token" in details
        check = channel.unary_unary("/grpc.health.v1.Health/Check")
        assert await check(std_health.HealthCheckRequest().SerializeToString()) is not None
    async with httpx.AsyncClient(base_url=registry.url) as http:
        rest = await http.get("/v1/registry/models", headers={"Authorization": f"Bearer {FETCH}"})
        assert rest.status_code == 401
        assert FETCH not in rest.text
    for secret in SECRETS:
        assert secret not in caplog.text


async def test_a_download_job_with_the_fetch_token_fills_its_cache(
    registry: ServedRegistry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(TOKEN_ENV, FETCH)
    log = tmp_path / "termination-log"
    code, out, err = await asyncio.to_thread(
        _job_download, registry.grpc_address, tmp_path / "volume", log
    )
    assert code == 0, err
    assert json.loads(out)["strategy"] == "server"
    copied = {p.name: p.read_bytes() for p in (tmp_path / "volume").rglob("*") if p.is_file()}
    assert {name: copied.get(name) for name in FILES} == FILES
    assert json.loads(log.read_text()) == {"sizeBytes": sum(len(b) for b in FILES.values())}


async def test_the_p2p_token_cannot_download(
    registry: ServedRegistry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(TOKEN_ENV, P2P)
    code, _, err = await asyncio.to_thread(
        _job_download, registry.grpc_address, tmp_path / "volume", tmp_path / "log"
    )
    assert code == 1
    assert "PERMISSION_DENIED" in err
    assert P2P not in err
    assert not (tmp_path / "volume").exists() or not any((tmp_path / "volume").rglob("*.json"))
    async with grpc.aio.insecure_channel(registry.grpc_address) as channel:
        for path in sorted(FETCH_METHODS):
            method = Method(path, not path.endswith("ListModelFiles"))
            code, details = await _call(channel, method, P2P)
            assert code == grpc.StatusCode.PERMISSION_DENIED, path
            assert details == DENIED_DETAILS[Scope.P2P], path


async def test_the_admin_token_still_opens_every_method(registry: ServedRegistry) -> None:
    async with grpc.aio.insecure_channel(registry.grpc_address) as channel:
        for method in served_methods():
            if method.path == "/grpc.health.v1.Health/Watch":
                continue  # a stream that never ends while the server serves
            code, _ = await _call(channel, method, ADMIN)
            assert code not in (
                grpc.StatusCode.PERMISSION_DENIED,
                grpc.StatusCode.UNAUTHENTICATED,
                grpc.StatusCode.UNIMPLEMENTED,
            ), method.path
        stub = mx_model_grpc.ModelServiceStub(channel)
        request = mx_model.ModelDownloadRequest(model_name="org/model")
        updates = [u async for u in stub.EnsureModelDownloaded(request, metadata=bearer(ADMIN))]
        assert updates[-1].status == mx_model.DOWNLOADED


def _tokens(admin: str | None, p2p: str | None, fetch: str) -> dict[str, Any]:
    values = {"auth_token": admin, "p2p_token": p2p, "fetch_token": fetch}
    return {key: SecretStr(value) for key, value in values.items() if value is not None}


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (_tokens(None, None, FETCH), "FLEXINFER_REGISTRY_AUTH_TOKEN is not"),
        (_tokens(ADMIN, None, ADMIN), "the fetch token must differ from the admin token"),
        (_tokens(ADMIN, P2P, P2P), "the P2P and fetch tokens must differ"),
        (_tokens(ADMIN, None, "short"), "fetch token #1 is not"),
    ],
)
def test_a_fetch_token_needs_an_admin_token_and_must_differ(
    tmp_path: Path, values: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        create_app(RegistrySettings(cache_dir=tmp_path, **values))
    for secret in (*SECRETS, "short"):
        assert secret not in str(info.value)


def test_the_fetch_token_reads_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLEXINFER_REGISTRY_FETCH_TOKEN", FETCH)
    monkeypatch.setenv("FLEXINFER_REGISTRY_FETCH_TOKEN_FILE", str(tmp_path / "f"))
    settings = RegistrySettings()
    assert settings.fetch_token is not None
    assert settings.fetch_token.get_secret_value() == FETCH
    assert settings.fetch_token_file == tmp_path / "f"
    assert FETCH not in repr(settings)
