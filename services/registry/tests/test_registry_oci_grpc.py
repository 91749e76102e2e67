"""oci:// models through the real registry: the modelexpress package's own stubs against our
gRPC server, which fetches from a real in-process OCI distribution server."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import modelexpress.model_pb2 as mx_model
import modelexpress.model_pb2_grpc as mx_model_grpc
import pytest
from google.rpc import error_details_pb2  # type: ignore[import-untyped]
from grpc_status import rpc_status  # type: ignore[import-untyped]

from flexinfer_common.serving import serve_in_background
from flexinfer_common.testing.oci_push import ModelPusher, digest_of, safetensors_bytes
from flexinfer_common.testing.oci_registry import TestRegistry, serve_registry
from flexinfer_registry.app import create_app
from flexinfer_registry.settings import RegistrySettings

FILES = {
    "config.json": b'{"model_type": "tiny"}',
    # Over 2 MiB: StreamModelFiles sends it in several 1 MiB chunks.
    "model.safetensors": safetensors_bytes({"embed": (1024, 1100), "head": (8, 8)}),
    "tokenizer/tokenizer.json": b'{"version": "1.0"}',
}


@dataclass
class Stack:
    oci: TestRegistry
    host: str
    stub: Any
    cache: Path

    def name(self, rest: str) -> str:
        return f"oci://{self.host}/{rest}"


@asynccontextmanager
async def stack(tmp_path: Path, oci: TestRegistry) -> AsyncIterator[Stack]:
    """An OCI registry with ``org/tiny:v1`` pushed, and a registry allowed to reach it."""
    async with serve_registry(oci) as url:
        await ModelPusher(url, "alice", "s3cret").push_model("org/tiny", "v1", FILES)
        host = url.removeprefix("http://")
        settings = RegistrySettings(port=0, grpc_port=0, cache_dir=tmp_path / "cache",
                                    oci_insecure_registries=[host])  # fmt: skip
        app: Any = create_app(settings)
        async with (
            serve_in_background(app),
            grpc.aio.insecure_channel(app.state.grpc_address) as channel,
        ):
            yield Stack(oci, host, mx_model_grpc.ModelServiceStub(channel), tmp_path / "cache")


async def _ensure(stub: Any, name: str) -> list[Any]:
    request = mx_model.ModelDownloadRequest(model_name=name)
    return [u async for u in stub.EnsureModelDownloaded(request)]


async def _stream(stub: Any, name: str) -> dict[str, bytes]:
    got: dict[str, bytes] = {}
    async for chunk in stub.StreamModelFiles(mx_model.ModelFilesRequest(model_name=name)):
        assert chunk.offset == len(got.get(chunk.relative_path, b""))
        got[chunk.relative_path] = got.get(chunk.relative_path, b"") + chunk.data
    return got


async def _refused(call: Any, code: grpc.StatusCode) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call
    assert info.value.code() == code, info.value.details()
    return info.value


def _reason(error: grpc.aio.AioRpcError) -> str:
    status = rpc_status.from_call(error)
    info = error_details_pb2.ErrorInfo()
    assert status is not None
    assert status.details[0].Unpack(info)
    return str(info.reason)


def _cached_files(cache: Path) -> list[Path]:
    """Every file the registry holds, cached or staged."""
    return [p for p in cache.rglob("*") if p.is_file() and p.suffix != ".json"]


async def test_by_tag_and_by_digest_byte_for_byte(tmp_path: Path) -> None:
    async with stack(tmp_path, TestRegistry()) as s:
        manifest = s.oci.tags["org/tiny"]["v1"]
        for name in (s.name("org/tiny:v1"), s.name(f"org/tiny@{manifest}")):
            updates = await _ensure(s.stub, name)
            assert updates[-1].status == mx_model.DOWNLOADED, updates[-1].message
            # The commit hash modelexpress clients expect: 40 hex digits of the manifest digest.
            assert updates[-1].resolved_revision == manifest.removeprefix("sha256:")[:40]
            assert await _stream(s.stub, name) == FILES
        blob_gets = [r for r in s.oci.requests if "/blobs/sha256:" in r[1]]
        assert len(blob_gets) == 2 * len(FILES)  # two cache entries, each fetched once
        assert [u.status for u in await _ensure(s.stub, s.name("org/tiny:v1"))] == [
            mx_model.DOWNLOADED
        ]


async def test_bearer_auth_from_the_auth_file(tmp_path: Path) -> None:
    oci = TestRegistry(auth="bearer", users={"alice": "s3cret"})
    async with serve_registry(oci) as url:
        await ModelPusher(url, "alice", "s3cret").push_model("org/tiny", "v1", FILES)
        host = url.removeprefix("http://")
        auth = tmp_path / "config.json"
        entry = {"username": "alice", "password": "s3cret"}
        auth.write_text(json.dumps({"auths": {host: entry}}))
        settings = RegistrySettings(port=0, grpc_port=0, cache_dir=tmp_path / "cache",
                                    oci_insecure_registries=[host], oci_auth_file=auth)  # fmt: skip
        app: Any = create_app(settings)
        async with (
            serve_in_background(app),
            grpc.aio.insecure_channel(app.state.grpc_address) as channel,
        ):
            stub = mx_model_grpc.ModelServiceStub(channel)
            updates = await _ensure(stub, f"oci://{host}/org/tiny:v1")
            assert updates[-1].status == mx_model.DOWNLOADED, updates[-1].message
            assert await _stream(stub, f"oci://{host}/org/tiny:v1") == FILES
    assert {r["user"] for r in oci.token_requests} == {"alice"}


async def test_unauthorized_is_permission_denied(tmp_path: Path) -> None:
    async with stack(tmp_path, TestRegistry(auth="bearer", users={"alice": "s3cret"})) as s:
        error = await _refused(
            _ensure(s.stub, s.name("org/tiny:v1")), grpc.StatusCode.PERMISSION_DENIED
        )
        assert "HTTP 401" in (error.details() or "")
        assert _reason(error) == "ACCESS_DENIED"
        assert _cached_files(s.cache) == []


async def test_missing_is_not_found(tmp_path: Path) -> None:
    async with stack(tmp_path, TestRegistry()) as s:
        error = await _refused(_ensure(s.stub, s.name("org/tiny:v9")), grpc.StatusCode.NOT_FOUND)
        assert "MANIFEST_UNKNOWN" in (error.details() or "")
        await _refused(_ensure(s.stub, s.name("org/none:v1")), grpc.StatusCode.NOT_FOUND)


async def test_a_corrupted_blob_fails_with_nothing_served(tmp_path: Path) -> None:
    async with stack(tmp_path, TestRegistry()) as s:
        weights = FILES["model.safetensors"]
        s.oci.tamper_blob(digest_of(weights), weights[:-1] + b"\x01")
        name = s.name("org/tiny:v1")
        error = await _refused(_ensure(s.stub, name), grpc.StatusCode.FAILED_PRECONDITION)
        assert "sha256 mismatch" in (error.details() or "")
        await _refused(_stream(s.stub, name), grpc.StatusCode.NOT_FOUND)
        assert _cached_files(s.cache) == []


async def test_a_hostile_title_is_refused(tmp_path: Path) -> None:
    async with stack(tmp_path, TestRegistry()) as s:
        url = f"http://{s.host}"
        await ModelPusher(url).push_model("org/evil", "v1", {"../../escape": b"x"})
        name = s.name("org/evil:v1")
        error = await _refused(_ensure(s.stub, name), grpc.StatusCode.FAILED_PRECONDITION)
        assert "escapes the model directory" in (error.details() or "")
        assert _reason(error) == "UNSAFE_PATH"
        assert not await asyncio.to_thread(lambda: list(tmp_path.rglob("escape")))


async def test_a_malformed_reference_is_refused_before_anything(tmp_path: Path) -> None:
    async with stack(tmp_path, TestRegistry()) as s:
        error = await _refused(
            _ensure(s.stub, s.name("Org/Tiny:v1")), grpc.StatusCode.INVALID_ARGUMENT
        )
        assert "repository" in (error.details() or "")
        assert s.oci.requests[-1][0] != "GET" or "Tiny" not in s.oci.requests[-1][1]
