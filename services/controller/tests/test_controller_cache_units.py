"""The cache adapter's pieces: file-name checks, the writer, progress parsing, the stub copy."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from flexinfer_common.api.status import CacheStatus as ApiCacheStatus
from flexinfer_common.bus.topics import ProgressEvent
from flexinfer_controller.adapters.registry.cache import parse_progress
from flexinfer_controller.adapters.registry.client import ModelRef, RemoteFile
from flexinfer_controller.adapters.registry.files import (
    MARKER,
    ModelWriter,
    UnsafeFileError,
    installed,
    safe_name,
)
from flexinfer_controller.core.cache import CacheState
from flexinfer_controller.core.planner import cache_status
from flexinfer_proxy.core.progress import ProgressBoard
from flexinfer_testing.repo import repo_root

HOSTILE = [
    "", "/etc/passwd", "../x", "a/../../x", "a/./b", "a//b", "a\\b", "nul\x00byte",
    "line\nbreak", MARKER, f"{MARKER}/x", "x" * 2000, ".", "..",
]  # fmt: skip


@pytest.mark.parametrize("name", HOSTILE)
def test_unsafe_names_are_refused(name: str) -> None:
    with pytest.raises(UnsafeFileError):
        safe_name(name)


def test_plain_names_pass() -> None:
    for name in ("config.json", "sub/dir/tokenizer.json", ".hidden", "a..b"):
        assert str(safe_name(name)) == name


def test_writer_installs_only_what_was_listed(tmp_path: Path) -> None:
    listed = [RemoteFile("config.json", 2), RemoteFile("sub/w.bin", 4), RemoteFile("e", 0)]
    writer = ModelWriter(tmp_path, "default_m", listed)
    writer.write("config.json", 0, b"{}")
    writer.end_file("config.json")
    with pytest.raises(UnsafeFileError, match="did not list"):
        writer.write("other.bin", 0, b"x")
    with pytest.raises(UnsafeFileError, match="does not follow"):
        writer.write("sub/w.bin", 2, b"ab")
    writer.write("sub/w.bin", 0, b"ab")
    with pytest.raises(UnsafeFileError, match="does not follow"):
        writer.write("sub/w.bin", 2, b"abc")  # more than listed
    writer.write("sub/w.bin", 2, b"cd")
    final = writer.install("s3://b/m")
    assert final == tmp_path / "default_m"
    assert (final / "sub" / "w.bin").read_bytes() == b"abcd"
    assert (final / "e").read_bytes() == b""
    assert installed(tmp_path, "default_m", "s3://b/m") == final
    assert installed(tmp_path, "default_m", "s3://b/other") is None
    assert [p.name for p in tmp_path.iterdir()] == ["default_m"], "no temporary left"


def test_writer_refuses_a_short_file_and_never_follows_symlinks(tmp_path: Path) -> None:
    writer = ModelWriter(tmp_path, "default_m", [RemoteFile("w.bin", 4)])
    writer.write("w.bin", 0, b"ab")
    with pytest.raises(UnsafeFileError, match="received 2 bytes, listed 4"):
        writer.install("s3://b/m")
    writer.discard()
    assert list(tmp_path.iterdir()) == []
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    writer = ModelWriter(tmp_path, "default_m", [RemoteFile("link", 1)])
    os.symlink(outside, writer.tmp / "link")  # planted: the writer must not write through it
    with pytest.raises(FileExistsError):  # O_EXCL|O_NOFOLLOW: the link is never opened
        writer.write("link", 0, b"x")
    writer.discard()
    assert not outside.exists()


def test_progress_parsing_and_model_ref() -> None:
    progress = parse_progress("downloading: 50 of 200 bytes (25%)")
    assert progress is not None
    assert progress.percent == 25
    assert progress.bytes_total == 200
    unknown = parse_progress("downloading: 7 bytes")
    assert unknown is not None
    assert unknown.fraction is None
    assert unknown.bytes_done == 7
    assert parse_progress("download in progress on another replica") is None
    assert ModelRef.of("HF://Org/Model") == ModelRef("hf://Org/Model", 0)
    assert ModelRef.of("s3://bucket/p") == ModelRef("s3://bucket/p", 3)


def test_proxy_comment_shows_download_progress() -> None:
    board = ProgressBoard()
    event = ProgressEvent.model_validate(
        {"model": "default/m", "phase": "pulling", "at": "2026-01-01T00:00:00Z",
         "progress": 0.42, "bytes_done": 42, "bytes_total": 100}
    )  # fmt: skip
    board.update(event)
    assert board.describe("default/m", 3) == (
        "flexinfer cold-start phase=pulling progress=42% bytes=42/100 waited=3s"
    )


def test_message_stubs_are_the_registrys() -> None:
    """The controller's model_pb2 copy is byte-identical to the registry's (generate.sh)."""
    root = repo_root()
    ours = root / "services/controller/src/flexinfer_controller/adapters/registry/_generated"
    theirs = root / "services/registry/src/flexinfer_registry/_generated/model_express"
    for name in ("model_pb2.py", "model_pb2.pyi"):
        assert (ours / name).read_bytes() == (theirs / name).read_bytes(), name


def test_status_cache_names_the_strategy_the_cache_gives() -> None:
    """Local mode's registry cache gives none: ``Registry``; the kubernetes gate its plan's."""
    pending = CacheState.pending("Downloading", "1 of 2 bytes")
    reported = cache_status(pending)
    assert reported is not None
    assert reported.strategy == "Registry"
    local = replace(CacheState.ready(Path("/m"), "done"), strategy="Local")
    assert cache_status(local) == ApiCacheStatus(strategy="Local", ready=True, message="done")
