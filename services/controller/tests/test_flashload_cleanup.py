"""Cleanup: keeps the named copies, removes the others and dead temps, touches nothing else."""

from __future__ import annotations

from pathlib import Path

import pytest

from flexinfer_common.errors import ConfigError
from flexinfer_controller.flashload import FlashLoadSettings, cleanup, flash_load
from flexinfer_controller.flashload.locks import held, lock_path
from flexinfer_controller.flashload.testing import make_model, tree_digest

SETTINGS = FlashLoadSettings(margin_mb=0, chunk_size_mb=1)


@pytest.fixture
def dest(tmp_path: Path) -> Path:
    source = make_model(tmp_path / "src", [100_000])
    dest = tmp_path / "shm"
    dest.mkdir()
    for key in ("default/keep-me", "default/drop-me", "other/old"):
        flash_load(source, dest, key, SETTINGS)
    # What else lives in /dev/shm: other programs' segments and directories.
    (dest / "PostgreSQL.1241548904").write_bytes(b"segment")
    (dest / "someone-elses-dir").mkdir()
    (dest / "someone-elses-dir" / "file").write_text("mine")
    (dest / ".hidden.tmp").mkdir()  # a temp name, but not the flash loader's prefix
    return dest


def names(dest: Path) -> list[str]:
    return sorted(p.name for p in dest.iterdir())


def test_cleanup_keeps_named_copies_and_removes_the_others(dest: Path, tmp_path: Path) -> None:
    report = cleanup(dest, keep=["default/keep-me"])
    assert sorted(report.removed) == ["default_drop-me", "other_old"]
    assert report.kept == ["default_keep-me"]
    assert report.busy == []
    assert names(dest) == [
        ".flashload-default_keep-me.lock",
        ".hidden.tmp",
        "PostgreSQL.1241548904",
        "default_keep-me",
        "someone-elses-dir",
    ]
    assert tree_digest(dest / "default_keep-me") == tree_digest(tmp_path / "src")
    assert (dest / "someone-elses-dir" / "file").read_text() == "mine"


def test_cleanup_with_nothing_kept_removes_every_copy_only(dest: Path) -> None:
    cleanup(dest, keep=[])
    assert names(dest) == [".hidden.tmp", "PostgreSQL.1241548904", "someone-elses-dir"]
    assert cleanup(dest, keep=[]).removed == []


def test_a_leftover_temp_is_removed_even_for_a_kept_model(dest: Path) -> None:
    leftover = dest / ".flashload-default_keep-me.0123456789ab.tmp"
    (leftover / "sub").mkdir(parents=True)
    (leftover / "sub" / "half.bin").write_bytes(b"half")
    report = cleanup(dest, keep=["default/keep-me", "default/drop-me", "other/old"])
    assert report.removed == [leftover.name]
    assert not leftover.exists()
    assert (dest / "default_keep-me").is_dir()


def test_a_name_a_loader_holds_is_left_alone(dest: Path) -> None:
    leftover = dest / ".flashload-default_drop-me.0123456789ab.tmp"
    leftover.mkdir()
    with held(lock_path(dest, "default_drop-me")):
        report = cleanup(dest, keep=[])
    assert report.busy == ["default_drop-me"]
    assert leftover.is_dir()
    assert (dest / "default_drop-me").is_dir()
    assert "other_old" in report.removed
    assert sorted(cleanup(dest, keep=[]).removed) == [leftover.name, "default_drop-me"]


def test_a_directory_named_like_a_copy_without_a_manifest_is_not_removed(dest: Path) -> None:
    (dest / "default_lookalike").mkdir()
    cleanup(dest, keep=[])
    assert (dest / "default_lookalike").is_dir()


def test_keep_names_are_checked(dest: Path) -> None:
    with pytest.raises(ConfigError):
        cleanup(dest, keep=["../etc"])
