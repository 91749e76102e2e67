"""``mx model download --cache-dir`` through the registry: the files land where DirectOnly
puts them (the prefetch Job's volume), written safely, and a complete copy is reused."""

from __future__ import annotations

import asyncio
import errno
import io
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from flexinfer_common.serving import serve_in_background
from flexinfer_registry.app import create_app
from flexinfer_registry.client import mx_fetch
from flexinfer_registry.client.chunk_decoder import FileChunkView
from flexinfer_registry.client.mx_cli import run
from flexinfer_registry.client.mx_client import MxClient
from flexinfer_registry.client.mx_direct import target_dir
from flexinfer_registry.client.mx_output import Output
from flexinfer_registry.settings import RegistrySettings

FILES = {"config.json": b'{"x": 1}', "w/model.safetensors": os.urandom(300_000), "empty": b""}


def cli(*argv: str) -> tuple[int, str]:
    """Run the CLI; (exit code, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    return run(list(argv), Output(stdout=out, stderr=err)), err.getvalue()


def tree(root: Path) -> dict[str, bytes]:
    """Every regular file under ``root`` by relative path, with its bytes."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.fixture
def source(tmp_path: Path) -> str:
    src = tmp_path / "roots" / "org" / "m"
    for name, data in FILES.items():
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        (src / name).write_bytes(data)
    return f"file://{src}"


@pytest.fixture
async def address(tmp_path: Path) -> AsyncIterator[str]:
    """A real registry whose file:// root holds the source."""
    roots = [tmp_path / "roots"]
    settings = RegistrySettings(
        host="127.0.0.1", port=0, grpc_port=0, cache_dir=tmp_path / "registry", file_roots=roots
    )
    app: Any = create_app(settings)
    async with serve_in_background(app, settings.host):
        yield str(app.state.grpc_address)


def download(address: str, name: str, cache: Path, strategy: str = "ServerOnly") -> tuple[int, str]:
    """``model download NAME --cache-dir CACHE`` as the prefetch Job runs it."""
    return cli("--server", address, "model", "download", name,
               "--strategy", strategy, "--cache-dir", str(cache))  # fmt: skip


async def test_server_download_lands_where_direct_does(
    tmp_path: Path, address: str, source: str
) -> None:
    code, err = await asyncio.to_thread(
        download, address, source, tmp_path / "direct", "DirectOnly"
    )
    assert code == 0, err
    code, err = await asyncio.to_thread(download, address, source, tmp_path / "server")
    assert code == 0, err
    direct, server = tree(tmp_path / "direct"), tree(tmp_path / "server")
    assert direct == server  # same paths (marker included), same bytes
    target = mx_fetch_target(tmp_path / "server", source)
    assert {k: v for k, v in tree(target).items() if k != mx_fetch.MARKER} == FILES
    assert not [p for p in target.parent.iterdir() if p.name.startswith(".")]


async def test_a_server_download_reports_its_size_to_the_termination_log(
    tmp_path: Path, address: str, source: str
) -> None:
    log = tmp_path / "termination-log"
    for _ in range(2):  # streamed, then a complete copy reused: the same size
        log.unlink(missing_ok=True)
        code, err = await asyncio.to_thread(
            cli, "--server", address, "model", "download", source, "--strategy", "ServerOnly",
            "--cache-dir", str(tmp_path / "cache"), "--termination-log", str(log),
        )  # fmt: skip
        assert code == 0, err
        assert json.loads(log.read_text()) == {"sizeBytes": sum(len(v) for v in FILES.values())}


async def test_without_a_cache_dir_the_registry_copy_is_measured(
    tmp_path: Path, address: str, source: str
) -> None:
    log = tmp_path / "termination-log"
    code, err = await asyncio.to_thread(
        cli, "--server", address, "model", "download", source, "--strategy", "ServerOnly",
        "--termination-log", str(log),
    )  # fmt: skip
    assert code == 0, err
    assert json.loads(log.read_text()) == {"sizeBytes": sum(len(v) for v in FILES.values())}


def mx_fetch_target(cache: Path, source: str) -> Path:
    """Where either path puts ``source``: ``<cache>/file/<path>``, as DirectOnly."""
    return target_dir(cache, source, 0)


async def test_a_complete_copy_is_reused_not_restreamed(
    tmp_path: Path, address: str, source: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    assert (await asyncio.to_thread(download, address, source, cache))[0] == 0
    before = {p: p.stat().st_ino for p in cache.rglob("*")}

    def no_stream(*_: object, **__: object) -> Any:
        raise AssertionError("a complete copy was streamed again")

    monkeypatch.setattr(MxClient, "stream", no_stream)
    code, err = await asyncio.to_thread(download, address, source, cache)
    assert code == 0, err
    assert {p: p.stat().st_ino for p in cache.rglob("*")} == before


@pytest.mark.parametrize("name", ["../escape", "/abs", "a/../../b", mx_fetch.MARKER, "a\\b"])
async def test_a_hostile_listed_name_is_refused(
    tmp_path: Path, address: str, source: str, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    def hostile(*_: object) -> dict[str, Any]:
        return {"model_name": source, "files": [{"path": name, "size": 1}], "total_size": 1}

    monkeypatch.setattr(MxClient, "list_files", hostile)
    cache = tmp_path / "cache"
    code, err = await asyncio.to_thread(download, address, source, cache)
    assert code == 1
    assert "unsafe file name" in err
    assert err.count("\n") == 1
    assert not mx_fetch_target(cache, source).exists()
    assert not (tmp_path / "escape").exists()
    assert not [p for p in cache.rglob("*") if p.is_file()]


def chunk(name: str, data: bytes, offset: int = 0) -> FileChunkView:
    return FileChunkView(name, memoryview(data), offset, len(data), True, True, None)


@pytest.mark.parametrize(
    "chunks",
    [
        [chunk("../a", b"x")],  # a hostile streamed name
        [chunk("b", b"x")],  # not listed
        [chunk("a", b"xy")],  # more than listed
        [chunk("a", b"x", offset=5)],  # a gap
        [],  # cut short
    ],
)
def test_streamed_chunks_must_match_the_listing(
    tmp_path: Path, chunks: list[FileChunkView]
) -> None:
    listing = {"files": [{"path": "a", "size": 1}]}
    target = tmp_path / "c" / "m"
    with pytest.raises(mx_fetch.UnsafeFileError):
        mx_fetch.write_streamed(chunks, listing, target, mx_fetch.marker("m", None, []))
    assert list((tmp_path / "c").iterdir()) == []


async def test_a_full_disk_fails_in_one_line_leaving_nothing(
    tmp_path: Path, address: str, source: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full(fd: int, data: Any) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(mx_fetch, "_write", full)
    cache = tmp_path / "cache"
    code, err = await asyncio.to_thread(download, address, source, cache)
    assert code == 1
    assert "No space left on device" in err
    assert err.count("\n") == 1
    assert not [p for p in cache.rglob("*") if p.is_file()]
