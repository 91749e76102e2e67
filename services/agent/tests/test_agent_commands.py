"""Running a tool: output, a missing tool, a failing one, one that hangs."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from flexinfer_agent.core.commands import (
    ToolFailedError,
    ToolMissingError,
    ToolTimeoutError,
    run_tool,
)


async def test_stdout_of_a_tool(fake_tool: Callable[..., str]) -> None:
    tool = fake_tool("nvidia-smi", {"-L": "nvidia-smi/a100-mig-L.txt"})
    assert (await run_tool([tool, "-L"], 10)).startswith("GPU 0: NVIDIA A100-SXM4-80GB")


async def test_a_missing_tool(tmp_path: Path) -> None:
    with pytest.raises(ToolMissingError) as raised:
        await run_tool([str(tmp_path / "nvidia-smi")], 10)
    assert raised.value.reason == "missing"


async def test_a_tool_exiting_non_zero_keeps_its_stderr(fake_tool: Callable[..., str]) -> None:
    tool = fake_tool("nvidia-smi", {})
    with pytest.raises(ToolFailedError, match="exited with 2: unknown option: -q") as raised:
        await run_tool([tool, "-q"], 10)
    assert raised.value.reason == "failed"


async def test_a_hanging_tool_is_killed(fake_tool: Callable[..., str]) -> None:
    tool = fake_tool("rocm-smi", {}, hang=True)
    with pytest.raises(ToolTimeoutError, match=r"within 0\.5 s") as raised:
        await run_tool([tool], 0.5)
    assert raised.value.reason == "timeout"


async def test_a_non_executable_file_is_missing(tmp_path: Path) -> None:
    path = tmp_path / "xpu-smi"
    path.write_text("not a program")
    with pytest.raises(ToolMissingError):
        await run_tool([str(path)], 10)


async def test_undecodable_output_is_replaced_not_fatal() -> None:
    code = "import sys; sys.stdout.buffer.write(b'\\xff ok')"
    assert (await run_tool([sys.executable, "-c", code], 10)).endswith(" ok")
