"""file:// sources: read only under the configured roots, decoded once, never followed out.

Through the modelexpress package's own stubs against a real registry, and the core's
decode/normalise/check and beneath-the-root opening directly.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path, PurePosixPath
from typing import Any

import grpc
import httpx
import modelexpress.model_pb2 as mx_model
import modelexpress.model_pb2_grpc as mx_model_grpc
import pytest
from google.rpc import error_details_pb2  # type: ignore[import-untyped]
from grpc_status import rpc_status  # type: ignore[import-untyped]

from flexinfer_common.errors import InvalidSpecError
from flexinfer_common.serving import serve_in_background
from flexinfer_registry.adapters.stores.memory import MemoryModelStore, MemorySourceStore
from flexinfer_registry.app import create_app
from flexinfer_registry.core.file_sources import (
    decode_file_url,
    open_beneath,
    opened_root,
    resolve_file_source,
)
from flexinfer_registry.core.providers.base import SourceNotAllowedError, UnsafePathError
from flexinfer_registry.core.store import Stores
from flexinfer_registry.settings import RegistrySettings

SECRET = b"password=hunter2\n"


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """``roots/models/m`` (a model), ``secret/`` (a planted secret outside every root)."""
    model = tmp_path / "roots" / "models" / "m"
    model.mkdir(parents=True)
    (model / "config.json").write_text('{"a": 1}')
    (tmp_path / "secret").mkdir()
    (tmp_path / "secret" / "token.txt").write_bytes(SECRET)
    return tmp_path


@asynccontextmanager
async def registry(
    tmp_path: Path, roots: list[Path], stores: Stores | None = None
) -> AsyncIterator[tuple[Any, Any, httpx.AsyncClient]]:
    """(ModelService stub, the app, an HTTP client on its admin API)."""
    settings = RegistrySettings(
        host="127.0.0.1", port=0, grpc_port=0, cache_dir=tmp_path / "cache", file_roots=roots
    )
    app: Any = create_app(settings, stores=stores)
    async with (
        serve_in_background(app, settings.host) as url,
        grpc.aio.insecure_channel(app.state.grpc_address) as channel,
        httpx.AsyncClient(base_url=url) as http,
    ):
        yield mx_model_grpc.ModelServiceStub(channel), app, http


async def _ensure(stub: Any, name: str) -> list[Any]:
    request = mx_model.ModelDownloadRequest(model_name=name)
    return [u async for u in stub.EnsureModelDownloaded(request)]


async def _stream(stub: Any, name: str) -> dict[str, bytes]:
    got: dict[str, bytes] = {}
    async for chunk in stub.StreamModelFiles(mx_model.ModelFilesRequest(model_name=name)):
        got[chunk.relative_path] = got.get(chunk.relative_path, b"") + chunk.data
    return got


def _details(error: grpc.aio.AioRpcError) -> list[Any]:
    """The google.rpc details of a refused call, unpacked."""
    status = rpc_status.from_call(error)
    assert status is not None, "no grpc-status-details-bin trailer"
    found = []
    for detail in status.details:
        for kind in (error_details_pb2.BadRequest, error_details_pb2.ErrorInfo):
            if detail.Is(kind.DESCRIPTOR):
                message = kind()
                detail.Unpack(message)
                found.append(message)
    return found


async def _refused(call: Any, code: grpc.StatusCode) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call
    assert info.value.code() == code, info.value.details()
    return info.value


async def _nothing_left(app: Any, http: httpx.AsyncClient, tmp_path: Path) -> None:
    """No record, no staging folder, no cached model: the refusal created nothing."""
    assert (await http.get("/v1/registry/models")).json() == []
    tmp = tmp_path / "cache" / ".tmp"
    assert not tmp.exists() or list(tmp.iterdir()) == []
    assert not (tmp_path / "cache" / "models").exists()


async def test_without_roots_no_directory_is_served(tree: Path) -> None:
    """The defect: EnsureModelDownloaded(file:///any/dir) then StreamModelFiles served a
    planted secret. Without roots every file:// name is PERMISSION_DENIED."""
    name = f"file://{tree / 'secret'}"
    async with registry(tree, []) as (stub, app, http):
        error = await _refused(_ensure(stub, name), grpc.StatusCode.PERMISSION_DENIED)
        assert "no file roots" in (error.details() or "")
        (info,) = _details(error)
        assert info.reason == "SOURCE_NOT_ALLOWED"
        await _refused(_stream(stub, name), grpc.StatusCode.PERMISSION_DENIED)
        await _nothing_left(app, http, tree)


async def test_roots_admit_their_models_and_nothing_else(tree: Path) -> None:
    roots = [tree / "roots"]
    async with registry(tree, roots) as (stub, app, http):
        outside = f"file://{tree / 'secret'}"
        await _refused(_ensure(stub, outside), grpc.StatusCode.PERMISSION_DENIED)
        for sneaky in (
            f"file://{tree}/roots/models/%2e%2e/%2E%2E/secret",
            f"file://{tree}/roots/models%2F..%2F..%2Fsecret",
        ):
            error = await _refused(_ensure(stub, sneaky), grpc.StatusCode.INVALID_ARGUMENT)
            (bad,) = _details(error)
            assert [v.field for v in bad.field_violations] == ["model_name"]
            assert "'..'" in bad.field_violations[0].description
        missing = f"file://{tree}/roots/models/nope"
        await _refused(_ensure(stub, missing), grpc.StatusCode.NOT_FOUND)
        await _refused(_ensure(stub, "file://db.internal/x"), grpc.StatusCode.INVALID_ARGUMENT)
        await _nothing_left(app, http, tree)
        good = f"file://{tree}/roots/models/m"
        assert (await _ensure(stub, good))[-1].status == mx_model.DOWNLOADED
        assert await _stream(stub, good) == {"config.json": b'{"a": 1}'}


async def test_a_symlink_out_of_the_root_is_never_followed(tree: Path) -> None:
    model = tree / "roots" / "models" / "m"
    os.symlink(tree / "secret" / "token.txt", model / "token.txt")
    os.symlink(tree / "secret", tree / "roots" / "models" / "linked")
    async with registry(tree, [tree / "roots"]) as (stub, app, http):
        linked = f"file://{tree}/roots/models/linked"
        await _refused(_ensure(stub, linked), grpc.StatusCode.PERMISSION_DENIED)
        error = await _refused(_ensure(stub, f"file://{model}"), grpc.StatusCode.PERMISSION_DENIED)
        assert "out of the file root" in (error.details() or "")
        await _nothing_left(app, http, tree)


async def test_a_model_cached_under_a_root_is_not_served_once_the_root_is_gone(
    tree: Path,
) -> None:
    stores = Stores(models=MemoryModelStore(), sources=MemorySourceStore())
    name = f"file://{tree}/roots/models/m"
    async with registry(tree, [tree / "roots"], stores) as (stub, _app, _http):
        assert (await _ensure(stub, name))[-1].status == mx_model.DOWNLOADED
    async with registry(tree, [], stores) as (stub, _app, _http):
        await _refused(_stream(stub, name), grpc.StatusCode.PERMISSION_DENIED)
        files = stub.ListModelFiles(mx_model.ModelFilesRequest(model_name=name))
        await _refused(files, grpc.StatusCode.PERMISSION_DENIED)
        deleted = await stub.DeleteModel(mx_model.DeleteModelRequest(model_name=name))
        assert deleted.success  # what is no longer allowed can still be cleaned up


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("file:///srv/%2e%2e/etc", "'..'"),
        ("file:///srv/a%2F..%2F..%2Fetc", "'..'"),
        ("file:///srv/./m", "'..'"),
        ("file:///srv/%00", "control"),
        ("file:///srv/%ff%fe", "UTF-8"),
        ("file:///srv/%zz", "percent-escape"),
        ("file:///srv/m?x=1", "query"),
        ("file:///srv/m#frag", "query"),
        ("file://host/srv", "host"),
        ("file://", "absolute"),
        ("s3://b/p", "not a file"),
    ],
)
def test_decode_refuses(name: str, why: str) -> None:
    with pytest.raises(InvalidSpecError, match=why):
        decode_file_url(name)


def test_decode_decodes_once() -> None:
    assert decode_file_url("file:///srv/%252e%252e/x") == PurePosixPath("/srv/%2e%2e/x")
    assert decode_file_url("FILE://localhost/srv/a%20b") == PurePosixPath("/srv/a b")


def test_resolve_checks_the_real_path_against_real_roots(tmp_path: Path) -> None:
    (tmp_path / "real" / "m").mkdir(parents=True)
    os.symlink(tmp_path / "real", tmp_path / "alias")
    source = resolve_file_source(f"file://{tmp_path}/real/m", [tmp_path / "alias"])
    assert source.path == (tmp_path / "real" / "m").resolve()
    assert source.relative == PurePosixPath("m")
    with pytest.raises(SourceNotAllowedError, match="outside"):
        resolve_file_source(f"file://{tmp_path}/real/m", [tmp_path / "other"])
    with pytest.raises(SourceNotAllowedError, match="no file roots"):
        resolve_file_source(f"file://{tmp_path}/real/m", [])


def test_a_directory_swapped_for_a_symlink_after_the_check_is_refused(tmp_path: Path) -> None:
    """Time of check, time of use: the path was inside the root when resolved, then a
    directory on it became a symlink out of the root; opening must not follow it."""
    root = tmp_path / "root"
    (root / "a" / "m").mkdir(parents=True)
    (root / "a" / "m" / "w.bin").write_bytes(b"ok")
    (tmp_path / "evil" / "m").mkdir(parents=True)
    (tmp_path / "evil" / "m" / "w.bin").write_bytes(SECRET)
    source = resolve_file_source(f"file://{root}/a/m", [root])
    shutil.rmtree(root / "a")
    os.symlink(tmp_path / "evil", root / "a")
    with opened_root(source) as root_fd, pytest.raises(UnsafePathError, match="symlink"):
        open_beneath(root_fd, source.relative / "w.bin", directory=False)


def test_open_beneath_opens_only_regular_files(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    os.mkfifo(tmp_path / "pipe")
    source = resolve_file_source(f"file://{tmp_path}", [tmp_path])
    with opened_root(source) as root_fd:
        for name in ("d", "pipe"):
            with pytest.raises(UnsafePathError, match="regular file"):
                open_beneath(root_fd, PurePosixPath(name), directory=False)
        with pytest.raises(UnsafePathError, match=r"'\.\.'"):
            open_beneath(root_fd, PurePosixPath("d/../d"), directory=True)
