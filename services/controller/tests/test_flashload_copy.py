"""The parallel copy: identical content on every copier, atomic publish, reuse, crash safety."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from flexinfer_controller.flashload import FlashLoadError, FlashLoadSettings, cleanup, flash_load
from flexinfer_controller.flashload.copiers import (
    COPIERS,
    AutoCopier,
    UnsupportedError,
    make_copier,
)
from flexinfer_controller.flashload.copiers.pread import PreadCopier
from flexinfer_controller.flashload.copy import copy_plan
from flexinfer_controller.flashload.plan import MANIFEST_NAME, TEMP_PREFIX, make_plan
from flexinfer_controller.flashload.testing import make_model, shm_dir, tree_digest, write_random

MIB = 1 << 20
SETTINGS = FlashLoadSettings(chunk_size_mb=1, buffer_size_kb=64, concurrency=3, margin_mb=0)
"""1 MiB ranges and 64 KiB calls: a few MiB of test files take many ranges and calls."""


def model(root: Path) -> Path:
    """Many small files, one file over the chunk size, nested dirs and empty files."""
    source = make_model(root, [3 * MIB + 12345, MIB], small_files=40)
    (source / "empty.txt").touch()
    (source / "a" / "b" / "c").mkdir(parents=True)
    (source / "a" / "b" / "c" / "empty").touch()
    (source / "a" / "b" / "weights.bin").write_bytes(os.urandom(70_001))
    (source / "emptydir").mkdir()
    return source


@pytest.fixture(params=["tmp", "shm"])
def place(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Path]:
    """A filesystem to copy on: tmp_path, or a dir in /dev/shm (skipped without room)."""
    if request.param == "tmp":
        yield tmp_path
        return
    with shm_dir(64 * MIB) as found:
        if found is None:
            pytest.skip("no /dev/shm with 64 MiB free on this machine")
        yield found


@pytest.fixture
def dest(place: Path) -> Path:
    """The copy's destination directory, on ``place``."""
    (place / "dest").mkdir()
    return place / "dest"


@pytest.fixture
def near(place: Path) -> Path:
    """A directory on the same filesystem as ``dest``: every copier works there."""
    (place / "near").mkdir()
    return place / "near"


def temps(dest: Path) -> list[str]:
    return sorted(p.name for p in dest.iterdir() if p.name.endswith(".tmp"))


@pytest.mark.parametrize("method", ["auto", *COPIERS])
def test_the_copy_is_identical(near: Path, dest: Path, method: str) -> None:
    source = model(near / "src")
    settings = SETTINGS.model_copy(update={"method": method})
    result = flash_load(source, dest, "default/llama", settings)
    if result.method == "auto":
        pytest.fail("auto reports the copier it chose")
    assert result.path == dest / "default_llama"
    assert not result.reused
    assert result.copied_bytes == sum(f.stat().st_size for f in source.rglob("*") if f.is_file())
    assert tree_digest(result.path) == tree_digest(source)
    assert (result.path / "emptydir").is_dir()
    assert (result.path / MANIFEST_NAME).is_file()
    assert temps(dest) == []


def test_auto_copies_across_filesystems_with_a_method_the_kernel_accepts(
    tmp_path: Path,
) -> None:
    with shm_dir(64 * MIB) as shm:
        if shm is None:
            pytest.skip("no /dev/shm with 64 MiB free on this machine")
        source = model(tmp_path / "src")
        result = flash_load(source, shm, "default/llama", SETTINGS)
        assert tree_digest(result.path) == tree_digest(source)
        # The method auto chose copies this pair when asked for by name as well.
        named = SETTINGS.model_copy(update={"method": result.method})
        assert tree_digest(flash_load(source, shm, "default/other", named).path) == (
            tree_digest(source)
        )


class RefusingCopier:
    """A copier the kernel refuses for every pair, as copy_file_range is across filesystems."""

    name = "refused"

    def copy(self, src: int, dst: int, offset: int, length: int) -> None:
        raise UnsupportedError("[Errno 18] Invalid cross-device link")


def test_a_refused_method_given_by_name_fails_naming_it(tmp_path: Path) -> None:
    source = model(tmp_path / "src")
    (tmp_path / "dest").mkdir()
    with pytest.raises(FlashLoadError, match=r"the refused copy method cannot copy .*auto"):
        flash_load(source, tmp_path / "dest", "default/llama", SETTINGS, copier=RefusingCopier())
    chain = AutoCopier([RefusingCopier(), PreadCopier(65536)])
    result = flash_load(source, tmp_path / "dest", "default/llama", SETTINGS, copier=chain)
    assert tree_digest(result.path) == tree_digest(source)
    assert result.method == "pread"


def test_a_single_file_is_copied_into_the_model_directory(tmp_path: Path, dest: Path) -> None:
    gguf = tmp_path / "model.gguf"
    write_random(gguf, 2 * MIB + 1, seed=7)
    result = flash_load(gguf, dest, "ns/tiny", SETTINGS)
    assert result.path == dest / "ns_tiny" / "model.gguf"
    assert tree_digest(dest / "ns_tiny") == {"model.gguf": tree_digest(tmp_path)["model.gguf"]}


def test_a_current_copy_is_reused(tmp_path: Path, dest: Path) -> None:
    source = model(tmp_path / "src")
    first = flash_load(source, dest, "default/llama", SETTINGS)
    inode = (first.path / "config.json").stat().st_ino
    again = flash_load(source, dest, "default/llama", SETTINGS)
    assert again.reused
    assert again.copied_bytes == 0
    assert (again.path / "config.json").stat().st_ino == inode


def test_a_changed_source_is_copied_again(tmp_path: Path, dest: Path) -> None:
    source = model(tmp_path / "src")
    flash_load(source, dest, "default/llama", SETTINGS)
    (source / "config.json").write_text('{"changed": true}\n')
    (source / "new.json").write_text("{}")
    again = flash_load(source, dest, "default/llama", SETTINGS)
    assert not again.reused
    assert tree_digest(again.path) == tree_digest(source)
    assert temps(dest) == []


def test_a_damaged_copy_is_copied_again(tmp_path: Path, dest: Path) -> None:
    source = model(tmp_path / "src")
    first = flash_load(source, dest, "default/llama", SETTINGS)
    os.truncate(first.path / "model-00001-of-00002.safetensors", 10)
    again = flash_load(source, dest, "default/llama", SETTINGS)
    assert not again.reused
    assert tree_digest(again.path) == tree_digest(source)


def test_sha256_reuse_sees_a_change_that_keeps_size_and_mtime(tmp_path: Path) -> None:
    source = model(tmp_path / "src")
    (tmp_path / "dest").mkdir()
    shard = source / "model-00002-of-00002.safetensors"
    hashed = SETTINGS.model_copy(update={"reuse_check": "sha256"})
    flash_load(source, tmp_path / "dest", "default/llama", hashed)
    before = shard.stat()
    write_random(shard, before.st_size, seed=99)  # same size, other bytes
    os.utime(shard, ns=(before.st_atime_ns, before.st_mtime_ns))
    again = flash_load(source, tmp_path / "dest", "default/llama", hashed)
    assert not again.reused
    assert tree_digest(again.path) == tree_digest(source)
    by_mtime = SETTINGS.model_copy(update={"reuse_check": "mtime"})
    # A copy made under one check is not judged by the other: copied once more, then reused.
    assert not flash_load(source, tmp_path / "dest", "default/llama", by_mtime).reused
    assert flash_load(source, tmp_path / "dest", "default/llama", by_mtime).reused


class FailingCopier:
    """A real pread copier that raises on its ``fail_at``-th range: a failure mid-copy."""

    name = "failing"

    def __init__(self, fail_at: int) -> None:
        self.inner = PreadCopier(65536)
        self.calls = 0
        self.fail_at = fail_at

    def copy(self, src: int, dst: int, offset: int, length: int) -> None:
        self.calls += 1
        if self.calls == self.fail_at:
            raise OSError(5, "Input/output error")
        self.inner.copy(src, dst, offset, length)


def test_a_failure_mid_copy_leaves_no_copy_and_no_temp(tmp_path: Path, dest: Path) -> None:
    source = model(tmp_path / "src")
    settings = SETTINGS.model_copy(update={"concurrency": 1})  # ranges in order: some copied
    copier = FailingCopier(fail_at=3)
    with pytest.raises(FlashLoadError, match="Input/output error"):
        flash_load(source, dest, "default/llama", settings, copier=copier)
    assert copier.calls == 3
    assert not (dest / "default_llama").exists()
    assert temps(dest) == []


def test_a_source_that_shrinks_during_the_copy_fails_it(tmp_path: Path, dest: Path) -> None:
    source = model(tmp_path / "src")
    plan = make_plan(source, dest, "default/llama")
    os.truncate(source / "model-00001-of-00002.safetensors", MIB)
    with pytest.raises(FlashLoadError, match="changed during the copy"):
        copy_plan(plan, SETTINGS, make_copier("auto", 65536))
    assert not (dest / "default_llama").exists()
    assert temps(dest) == []


CRASH = """
import os, sys
from pathlib import Path
from flexinfer_controller.flashload import FlashLoadSettings, flash_load
from flexinfer_controller.flashload.copiers.pread import PreadCopier

class Crash(PreadCopier):
    calls = 0
    def copy(self, src, dst, offset, length):
        super().copy(src, dst, offset, length)
        Crash.calls += 1
        if Crash.calls == 2:
            os._exit(9)  # no except, no finally: what a SIGKILL or an OOM kill leaves

settings = FlashLoadSettings(chunk_size_mb=1, concurrency=1, margin_mb=0)
flash_load(Path(sys.argv[1]), Path(sys.argv[2]), "default/llama", settings, copier=Crash(65536))
"""


def test_a_crashed_copy_leaves_only_a_temp_that_cleanup_removes(tmp_path: Path, dest: Path) -> None:
    source = model(tmp_path / "src")
    done = subprocess.run(
        [sys.executable, "-c", CRASH, str(source), str(dest)], capture_output=True, timeout=120
    )
    assert done.returncode == 9, done.stderr
    assert not (dest / "default_llama").exists()
    left = temps(dest)
    assert len(left) == 1
    assert left[0].startswith(f"{TEMP_PREFIX}default_llama.")
    report = cleanup(dest, keep=["default/llama"])
    assert report.removed == left
    assert temps(dest) == []
    # The next load copies afresh, and the crash's lock is free.
    assert tree_digest(flash_load(source, dest, "default/llama", SETTINGS).path) == tree_digest(
        source
    )
