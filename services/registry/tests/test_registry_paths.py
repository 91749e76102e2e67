"""Hostile model names and file paths: rejected before anything is written."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import modelexpress.model_pb2 as mx_model
import modelexpress.model_pb2_grpc as mx_model_grpc
import pytest

from flexinfer_common.errors import InvalidSpecError
from flexinfer_common.serving import serve_in_background
from flexinfer_registry.app import create_app
from flexinfer_registry.core.cache import ModelCache
from flexinfer_registry.core.paths import (
    cache_key,
    check_model_name,
    check_relative_path,
    model_dir_name,
    resolve_inside,
)
from flexinfer_registry.settings import RegistrySettings
from flexinfer_registry.testing.fakes import OneProvider, ScriptedProvider

BAD_NAMES = [
    "",
    "../etc",
    "org/../../x",
    "/etc/passwd",
    "a\x00b",
    "a\\b",
    "s3://b/../x",
    "./m",
    "x" * 2000,
]
BAD_PATHS = ["../x", "a/../../x", "/etc/passwd", "a\x00", "a\\b", ".", ""]


@pytest.mark.parametrize("name", BAD_NAMES)
def test_bad_model_names(name: str) -> None:
    with pytest.raises(InvalidSpecError):
        check_model_name(name)


@pytest.mark.parametrize("name", ["org/model", "s3://bucket/prefix", "file:///abs/dir", "m..x"])
def test_good_model_names(name: str) -> None:
    assert check_model_name(name) == name
    assert "/" not in model_dir_name(cache_key(name, None, False))


@pytest.mark.parametrize("path", BAD_PATHS)
def test_bad_relative_paths(path: str) -> None:
    with pytest.raises(InvalidSpecError):
        check_relative_path(path)


def test_symlink_out_of_the_model_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "model"
    root.mkdir()
    (tmp_path / "secret").write_text("s")
    os.symlink(tmp_path / "secret", root / "link")
    with pytest.raises(InvalidSpecError, match="leaves"):
        resolve_inside(root, "link")


def test_cache_never_loads_a_manifest_pointing_outside(tmp_path: Path) -> None:
    cache = ModelCache(tmp_path)
    staging = cache.staging("m")
    (staging / "files" / "a").write_bytes(b"x")
    model = cache.install("m", "m", staging, None, False)
    (tmp_path / "outside").write_bytes(b"x")
    (model.files_dir / "a").unlink()
    os.symlink(tmp_path / "outside", model.files_dir / "a")
    assert cache.load("m") is None


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[Any, str, Path]]:
    cache = tmp_path / "cache"
    settings = RegistrySettings(port=0, grpc_port=0, cache_dir=cache, eviction_enabled=False)
    app: Any = create_app(settings, providers=OneProvider(ScriptedProvider({"a.txt": b"a"})))
    async with (
        serve_in_background(app) as url,
        grpc.aio.insecure_channel(app.state.grpc_address) as ch,
    ):
        yield mx_model_grpc.ModelServiceStub(ch), url, cache


async def test_grpc_rejects_hostile_names_and_paths(served: tuple[Any, str, Path]) -> None:
    stub, _, cache = served
    for name in ("../../etc", "/etc", "a\x00b"):
        with pytest.raises(grpc.aio.AioRpcError) as info:
            _ = [
                u
                async for u in stub.EnsureModelDownloaded(
                    mx_model.ModelDownloadRequest(model_name=name)
                )
            ]
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert not (cache / "models").exists()
    assert not (cache / ".tmp").exists()
    _ = [
        u
        async for u in stub.EnsureModelDownloaded(mx_model.ModelDownloadRequest(model_name="ok/m"))
    ]
    for path in ("../../../etc/passwd", "/etc/passwd"):
        request = mx_model.ModelFilesRequest(
            model_name="ok/m", file_selector=mx_model.ModelFileSelector(paths=[path])
        )
        with pytest.raises(grpc.aio.AioRpcError) as info:
            _ = [c async for c in stub.StreamModelFiles(request)]
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    missing = mx_model.ModelFilesRequest(
        model_name="ok/m", file_selector=mx_model.ModelFileSelector(paths=["nope.txt"])
    )
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await stub.ListModelFiles(missing)
    assert info.value.code() == grpc.StatusCode.NOT_FOUND


async def test_rest_rejects_hostile_names(served: tuple[Any, str, Path]) -> None:
    _, url, _ = served
    async with httpx.AsyncClient(base_url=url) as client:
        for bad in ("..%2F..%2Fetc", "a%00b"):
            response = await client.delete(f"/v1/registry/models/{bad}")
            assert response.status_code == 400, response.text
            assert response.json()["error"]["code"] == "invalid_argument"
