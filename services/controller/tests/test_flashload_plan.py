"""What a flash load copies: names, symlinks, special files, excludes, overlaps."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from flexinfer_common.errors import ConfigError, PermanentError
from flexinfer_controller.flashload import FlashLoadError, UnsafeSourceError
from flexinfer_controller.flashload.plan import MANIFEST_NAME, PAGE, make_plan, safe_name


@pytest.mark.parametrize(
    ("key", "safe"),
    [
        ("default/llama-3", "default_llama-3"),
        ("team-a/qwen2.5-7b", "team-a_qwen2.5-7b"),
        ("llama", "llama"),
    ],
)
def test_safe_name(key: str, safe: str) -> None:
    assert safe_name(key) == safe


@pytest.mark.parametrize(
    "key", ["", "a/b/c", "../x", "default/..", "Default/llama", "ns/.hidden", "ns/a_b", "ns/", "/x"]
)
def test_a_name_that_is_not_a_model_key_is_refused(key: str) -> None:
    with pytest.raises(ConfigError, match="not namespace/name"):
        safe_name(key)


@pytest.fixture
def source(tmp_path: Path) -> Path:
    root = tmp_path / "model"
    (root / "sub").mkdir(parents=True)
    (root / "config.json").write_text("{}")
    (root / "sub" / "weights.bin").write_bytes(b"x" * 5000)
    (root / "empty").touch()
    (tmp_path / "dest").mkdir()
    return root


def test_the_plan_lists_files_dirs_and_sizes(source: Path, tmp_path: Path) -> None:
    plan = make_plan(source, tmp_path / "dest", "default/m")
    assert [(f.path, f.size) for f in plan.files] == [
        ("config.json", 2),
        ("empty", 0),
        ("sub/weights.bin", 5000),
    ]
    assert plan.dirs == ("sub",)
    assert plan.final == tmp_path / "dest" / "default_m"
    assert plan.total_bytes == 5002
    assert plan.needed_bytes == PAGE * (1 + 0 + 2) + PAGE * 2  # pages of files, then dirs


def test_a_symlink_inside_the_source_is_copied_as_its_file(source: Path, tmp_path: Path) -> None:
    (source / "alias.bin").symlink_to("sub/weights.bin")
    plan = make_plan(source, tmp_path / "dest", "default/m")
    assert ("alias.bin", 5000) in [(f.path, f.size) for f in plan.files]


def test_a_symlink_leaving_the_source_is_refused(source: Path, tmp_path: Path) -> None:
    (tmp_path / "secret").write_text("outside")
    (source / "sub" / "leak").symlink_to("../../secret")
    with pytest.raises(UnsafeSourceError, match="symlink leaves the model directory") as caught:
        make_plan(source, tmp_path / "dest", "default/m")
    assert isinstance(caught.value, PermanentError)
    assert "leak" in str(caught.value)


def test_a_dangling_symlink_is_refused(source: Path, tmp_path: Path) -> None:
    (source / "gone").symlink_to("missing-file")
    with pytest.raises(UnsafeSourceError, match="dangling symlink"):
        make_plan(source, tmp_path / "dest", "default/m")


def test_a_symlinked_directory_is_refused(source: Path, tmp_path: Path) -> None:
    (source / "again").symlink_to("sub")
    with pytest.raises(UnsafeSourceError, match="symlinked directory"):
        make_plan(source, tmp_path / "dest", "default/m")


def test_a_fifo_is_refused(source: Path, tmp_path: Path) -> None:
    os.mkfifo(source / "pipe")
    with pytest.raises(UnsafeSourceError, match="not a regular file"):
        make_plan(source, tmp_path / "dest", "default/m")


def test_a_socket_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "m"  # a short path: a unix socket's name is limited to 107 bytes
    root.mkdir()
    (tmp_path / "dest").mkdir()
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(str(root / "s"))
        with pytest.raises(UnsafeSourceError, match="not a regular file"):
            make_plan(root, tmp_path / "dest", "default/m")


def test_excluded_paths_and_an_old_manifest_are_not_copied(source: Path, tmp_path: Path) -> None:
    (source / "sub" / "old.pth").write_bytes(b"p")
    (source / MANIFEST_NAME).write_text("{}")
    plan = make_plan(source, tmp_path / "dest", "default/m", exclude=["*.pth", "empty"])
    assert [f.path for f in plan.files] == ["config.json", "sub/weights.bin"]


def test_a_missing_source_or_destination_is_an_error(source: Path, tmp_path: Path) -> None:
    with pytest.raises(FlashLoadError, match="cannot be read"):
        make_plan(tmp_path / "nope", tmp_path / "dest", "default/m")
    with pytest.raises(ConfigError, match="not a directory"):
        make_plan(source, tmp_path / "no-dest", "default/m")


def test_a_copy_overlapping_its_source_is_refused(source: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="overlap"):
        make_plan(source, source, "default/m")
    with pytest.raises(ConfigError, match="overlap"):
        make_plan(source, tmp_path, "model")
