"""``flexinfer flash-load``: one line per copy, one line per error, the documented exit codes."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from flexinfer_testing.stack import flexinfer_command


def flash_load(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        flexinfer_command("flash-load", *args), capture_output=True, text=True, timeout=120
    )


@pytest.fixture
def model(tmp_path: Path) -> Path:
    root = tmp_path / "model"
    (root / "sub").mkdir(parents=True)
    (root / "config.json").write_text("{}")
    (root / "sub" / "weights.bin").write_bytes(bytes(range(256)) * 4000)
    (tmp_path / "shm").mkdir()
    return root


def test_copy_prints_one_line_then_reuses(model: Path, tmp_path: Path) -> None:
    shm = tmp_path / "shm"
    done = flash_load(
        "--source", str(model), "--dest", str(shm), "--name", "default/m", "--workers", "2"
    )
    assert done.returncode == 0, done.stderr
    assert re.fullmatch(
        rf"copied with \w+ default/m: 1024002 bytes in [\d.]+ s, [\d.]+ GB/s -> {shm}/default_m\n",
        done.stdout,
    ), done.stdout
    assert (shm / "default_m" / "sub" / "weights.bin").read_bytes() == bytes(range(256)) * 4000
    again = flash_load("--source", str(model), "--dest", str(shm), "--name", "default/m")
    assert again.returncode == 0
    assert again.stdout.startswith("reused default/m: 0 bytes in ")


def test_cleanup_removes_what_is_not_kept(model: Path, tmp_path: Path) -> None:
    shm = tmp_path / "shm"
    for name in ("default/a", "default/b"):
        assert (
            flash_load("--source", str(model), "--dest", str(shm), "--name", name).returncode == 0
        )
    done = flash_load("cleanup", "--dest", str(shm), "--keep", "default/a")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "removed 1, kept 1, busy 0\n  removed default_b\n"
    assert sorted(p.name for p in shm.iterdir()) == [".flashload-default_a.lock", "default_a"]


@pytest.mark.parametrize(
    ("extra", "code", "message"),
    [
        (["--margin-mb", "1000000000"], 3, "plus a 953.7 TiB margin, but"),
        (["--name", "Not_A_Name"], 2, "is not namespace/name"),
        (["--workers", "0"], 2, "invalid setting"),
    ],
)
def test_errors_are_one_line_with_their_exit_code(
    model: Path, tmp_path: Path, extra: list[str], code: int, message: str
) -> None:
    args = ["--source", str(model), "--dest", str(tmp_path / "shm"), "--name", "default/m"]
    done = flash_load(*args, *extra)
    assert done.returncode == code
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1
    assert done.stderr.startswith("flexinfer flash-load: ")
    assert message in done.stderr


def test_an_escaping_symlink_exits_4(model: Path, tmp_path: Path) -> None:
    (model / "leak").symlink_to("/etc/hostname")
    done = flash_load("--source", str(model), "--dest", str(tmp_path / "shm"), "--name", "d/m")
    assert done.returncode == 4
    assert "symlink leaves the model directory" in done.stderr
    assert list((tmp_path / "shm").iterdir()) == []
