"""Fixtures shared by every test package (the only conftest.py in the repository)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from flexinfer_testing.contract import Target, start_engine, start_proxy
from flexinfer_testing.engines import Process
from flexinfer_testing.fake_tools import FakeTool, fake_tool_maker
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


@pytest.fixture(scope="session")
def contract_engine(
    tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Process]:
    """The OpenAI contract's first target: the reference engine, as its own process."""
    with start_engine(tiny_model_dir, tmp_path_factory.mktemp("contract-engine")) as engine:
        yield engine


@pytest.fixture(scope="session")
def contract_proxy(
    contract_engine: Process, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Process]:
    """The second: the same engine behind the real proxy (``flexinfer proxy --static``)."""
    with start_proxy(contract_engine, tmp_path_factory.mktemp("contract-proxy")) as proxy:
        yield proxy


@pytest.fixture(scope="session", params=["engine", "proxy"])
def target(request: pytest.FixtureRequest) -> Target:
    """Each contract target in turn: a contract test runs against both."""
    process: Process = request.getfixturevalue(f"contract_{request.param}")
    return Target(str(request.param), process.url)


@pytest.fixture
def fake_tool(tmp_path: Path, request: pytest.FixtureRequest) -> FakeTool:
    """Makes fake command-line tools that print recorded outputs from the test's fixtures/."""
    return fake_tool_maker(tmp_path / "bin", Path(request.path).parent / "fixtures")
