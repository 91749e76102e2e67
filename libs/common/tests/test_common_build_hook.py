"""The wheel build hook (libs/common/hatch_build.py): when it compiles, and how it refuses.

Each test builds flexinfer-common's wheel with pip, as ``./dev compile`` and a release image
do, but with a setting that keeps mypyc from running (a compile takes minutes; the compiled
wheels are built and tested by the proxy-compiled variant of ``./dev test``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

from flexinfer_testing.repo import repo_root

NO_COMPILER = "/nonexistent/cc"


def build_wheel(out: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """``pip wheel`` of flexinfer-common into ``out`` with ``env`` added."""
    command = [sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps"]
    command += [
        "--disable-pip-version-check",
        "-v",
        "-w",
        str(out),
        str(repo_root() / "libs/common"),
    ]
    return subprocess.run(
        command, env={**os.environ, **env}, capture_output=True, text=True, timeout=300
    )


def wheel_files(out: Path) -> tuple[str, list[str]]:
    """The one wheel's file name and the names inside it."""
    (wheel,) = out.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        return wheel.name, archive.namelist()


def test_never_compiling_builds_a_pure_wheel(tmp_path: Path) -> None:
    done = build_wheel(tmp_path, FLEXINFER_COMPILE="0")
    assert done.returncode == 0, done.stderr
    name, files = wheel_files(tmp_path)
    assert name.endswith("-py3-none-any.whl")
    assert "flexinfer_common/http1/server.py" in files
    assert not [f for f in files if f.endswith(".so")]


def test_auto_without_a_compiler_builds_a_pure_wheel_and_says_why(tmp_path: Path) -> None:
    done = build_wheel(tmp_path, FLEXINFER_COMPILE="auto", CC=NO_COMPILER)
    assert done.returncode == 0, done.stderr
    assert (
        f"building a pure-Python wheel: no C compiler ({NO_COMPILER})" in done.stdout + done.stderr
    )
    name, _ = wheel_files(tmp_path)
    assert name.endswith("-py3-none-any.whl")


def test_required_without_a_compiler_fails_the_build(tmp_path: Path) -> None:
    done = build_wheel(tmp_path, FLEXINFER_COMPILE="1", CC=NO_COMPILER)
    assert done.returncode != 0
    assert (
        f"FLEXINFER_COMPILE=1 but no C compiler ({NO_COMPILER}) on PATH"
        in done.stdout + done.stderr
    )
    assert list(tmp_path.glob("*.whl")) == []


def test_an_unknown_setting_fails_the_build_naming_it(tmp_path: Path) -> None:
    done = build_wheel(tmp_path, FLEXINFER_COMPILE="yes")
    assert done.returncode != 0
    assert "FLEXINFER_COMPILE must be auto, 1 or 0, not 'yes'" in done.stdout + done.stderr
