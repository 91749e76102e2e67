"""Token scopes over real gRPC calls: the admin token opens everything, the P2P token the
P2pService only, no token nothing; neither token ever shows in details or logs."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import modelexpress.model_pb2 as mx_model
import modelexpress.model_pb2_grpc as mx_model_grpc
import modelexpress.p2p_pb2 as mx_p2p
import modelexpress.p2p_pb2_grpc as mx_p2p_grpc
import pytest
from pydantic import SecretStr

from flexinfer_common.errors import ConfigError
from flexinfer_registry._generated.model_express import api_pb2 as mx_api
from flexinfer_registry._generated.model_express import api_pb2_grpc as mx_api_grpc
from flexinfer_registry._generated.model_express import health_pb2 as mx_health
from flexinfer_registry._generated.model_express import health_pb2_grpc as mx_health_grpc
from flexinfer_registry.app import create_app
from flexinfer_registry.server.grpc_auth import P2P_SERVICE
from flexinfer_registry.settings import RegistrySettings
from flexinfer_registry.testing.served import ServedRegistry, bearer, served_registry, token_file

ADMIN = "admin-token-0123456789abcdef"
P2P = "p2p-token-0123456789abcdef"
ROTATED = "p2p-token-rotated-0123456789"


@pytest.fixture
async def registry(tmp_path: Path) -> AsyncIterator[ServedRegistry]:
    """A registry with an admin token, a P2P token and a P2P token file (two lines)."""
    rotation = token_file(tmp_path / "p2p-tokens", ROTATED)
    settings = RegistrySettings(
        port=0,
        grpc_port=0,
        cache_dir=tmp_path / "cache",
        auth_token=SecretStr(ADMIN),
        p2p_token=SecretStr(P2P),
        p2p_token_file=rotation,
    )
    async with served_registry(settings, {"a.json": b"{}"}) as served:
        yield served


def _api(channel: grpc.aio.Channel) -> Any:
    return mx_api_grpc.ApiServiceStub(channel)  # type: ignore[no-untyped-call]


def _health(channel: grpc.aio.Channel) -> Any:
    return mx_health_grpc.HealthServiceStub(channel)  # type: ignore[no-untyped-call]


def _identity() -> Any:
    return mx_p2p.SourceIdentity(mx_version="0.7.0", model_name="Org/Model", dtype="bf16")


async def _p2p_round(channel: grpc.aio.Channel, metadata: Any) -> None:
    """Every P2pService method once; raises AioRpcError on the first refusal."""
    stub = mx_p2p_grpc.P2pServiceStub(channel)
    worker = mx_p2p.WorkerMetadata(worker_rank=0, agent_name="agent", nixl_metadata=b"n")
    published = await stub.PublishMetadata(
        mx_p2p.PublishMetadataRequest(identity=_identity(), worker=worker, worker_id="w"),
        metadata=metadata,
    )
    assert published.success
    sid = published.mx_source_id
    ready = mx_p2p.UpdateStatusRequest(
        mx_source_id=sid, worker_id="w", status=mx_p2p.SOURCE_STATUS_READY
    )
    assert (await stub.UpdateStatus(ready, metadata=metadata)).success
    listed = await stub.ListSources(
        mx_p2p.ListSourcesRequest(status_filter=mx_p2p.SOURCE_STATUS_READY), metadata=metadata
    )
    assert [ref.worker_id for ref in listed.instances] == ["w"]
    found = await stub.GetMetadata(
        mx_p2p.GetMetadataRequest(mx_source_id=sid, worker_id="w"), metadata=metadata
    )
    assert found.found


async def _ensure(channel: grpc.aio.Channel, metadata: Any) -> list[Any]:
    stub = mx_model_grpc.ModelServiceStub(channel)
    request = mx_model.ModelDownloadRequest(model_name="org/model")
    return [u async for u in stub.EnsureModelDownloaded(request, metadata=metadata)]


async def _refused(call: Any) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call
    return info.value


async def test_admin_token_opens_every_service(registry: ServedRegistry) -> None:
    async with grpc.aio.insecure_channel(registry.grpc_address) as channel:
        await _p2p_round(channel, bearer(ADMIN))
        updates = await _ensure(channel, bearer(ADMIN))
        assert updates[-1].status == mx_model.DOWNLOADED
        api = _api(channel)
        answer = await api.SendRequest(mx_api.ApiRequest(action="ping"), metadata=bearer(ADMIN))
        assert answer is not None


async def test_p2p_tokens_open_the_p2p_service_only(
    registry: ServedRegistry, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with grpc.aio.insecure_channel(registry.grpc_address) as channel:
        for token in (P2P, ROTATED):
            await _p2p_round(channel, bearer(token))
            streamed = await _refused(_ensure(channel, bearer(token)))
            assert streamed.code() == grpc.StatusCode.PERMISSION_DENIED
            assert P2P_SERVICE in (streamed.details() or "")
            files = mx_model_grpc.ModelServiceStub(channel).ListModelFiles(
                mx_model.ModelFilesRequest(model_name="org/model"), metadata=bearer(token)
            )
            assert (await _refused(files)).code() == grpc.StatusCode.PERMISSION_DENIED
            api = _api(channel).SendRequest(
                mx_api.ApiRequest(action="ping"), metadata=bearer(token)
            )
            refused = await _refused(api)
            assert refused.code() == grpc.StatusCode.PERMISSION_DENIED
            for secret in (ADMIN, P2P, ROTATED):
                assert secret not in (refused.details() or "")
    async with httpx.AsyncClient(base_url=registry.url) as http:
        rest = await http.get("/v1/registry/models", headers={"Authorization": f"Bearer {P2P}"})
        assert rest.status_code == 401
        assert P2P not in rest.text
    logged = caplog.text
    for secret in (ADMIN, P2P, ROTATED):
        assert secret not in logged


async def test_no_or_wrong_token_is_unauthenticated_but_probes_stay_open(
    registry: ServedRegistry,
) -> None:
    async with grpc.aio.insecure_channel(registry.grpc_address) as channel:
        for metadata in ((), bearer("not-a-token-0123456789"), (("authorization", P2P),)):
            listed = mx_p2p_grpc.P2pServiceStub(channel).ListSources(
                mx_p2p.ListSourcesRequest(), metadata=metadata
            )
            refused = await _refused(listed)
            assert refused.code() == grpc.StatusCode.UNAUTHENTICATED
            assert refused.details() == "missing or invalid bearer token"
            streamed = await _refused(_ensure(channel, metadata))
            assert streamed.code() == grpc.StatusCode.UNAUTHENTICATED
        health = await _health(channel).GetHealth(mx_health.HealthRequest())
        assert health.status == "ok"


def test_a_p2p_token_needs_an_admin_token_and_must_differ(tmp_path: Path) -> None:
    alone = RegistrySettings(cache_dir=tmp_path, p2p_token=SecretStr(P2P))
    with pytest.raises(ConfigError, match="FLEXINFER_REGISTRY_AUTH_TOKEN is not"):
        create_app(alone)
    same = RegistrySettings(
        cache_dir=tmp_path, auth_token=SecretStr(ADMIN), p2p_token=SecretStr(ADMIN)
    )
    with pytest.raises(ConfigError, match="must differ"):
        create_app(same)
    weak = RegistrySettings(
        cache_dir=tmp_path, auth_token=SecretStr(ADMIN), p2p_token=SecretStr("short")
    )
    with pytest.raises(ConfigError, match="P2P token #1 is not") as info:
        create_app(weak)
    assert "short" not in str(info.value)


def test_the_p2p_token_reads_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLEXINFER_REGISTRY_P2P_TOKEN", P2P)
    monkeypatch.setenv("FLEXINFER_REGISTRY_P2P_TOKEN_FILE", str(tmp_path / "f"))
    settings = RegistrySettings()
    assert settings.p2p_token is not None
    assert settings.p2p_token.get_secret_value() == P2P
    assert settings.p2p_token_file == tmp_path / "f"
    assert P2P not in repr(settings)
