"""Fixtures shared by every test package (the only conftest.py in the repository)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from flexinfer_testing.stack import StackFactory, stack_factory


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny reference model generated once per test session."""
    out = tmp_path_factory.mktemp("models") / "tiny"
    subprocess.run(
        [sys.executable, "-m", "flexinfer_engine", "generate", "tiny", "--out", str(out)],
        check=True,
        capture_output=True,
    )
    return out


@pytest.fixture(params=["embedded", "distributed"])
def stacks(
    request: pytest.FixtureRequest, tmp_path: Path, tiny_model_dir: Path
) -> Iterator[StackFactory]:
    """Starts stacks in each mode: embedded (flexinfer up) and distributed (Redis, PostgreSQL)."""
    with stack_factory(str(request.param), tmp_path, tiny_model_dir) as factory:
        yield factory
