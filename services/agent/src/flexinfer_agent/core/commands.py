"""Running a vendor tool: its stdout, or one of three errors a source can report.

Every failure is an exception with a short ``reason`` (the metric label) rather than a
crash: a tool that is not installed, one that exits non-zero, one that hangs past its
timeout, and (raised by the parsers) output that is not what the tool prints.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence


class DiscoveryError(Exception):
    """A source could not say what GPUs there are; ``reason`` labels the error metric."""

    reason = "failed"


class ToolMissingError(DiscoveryError):
    """The tool (or the library) is not installed here: the usual case on other vendors."""

    reason = "missing"


class ToolFailedError(DiscoveryError):
    """The tool ran and exited non-zero (no driver loaded, no permission, unknown flag)."""

    reason = "failed"


class ToolTimeoutError(DiscoveryError):
    """The tool did not finish in time (a hung driver); it was killed."""

    reason = "timeout"


class BadOutputError(DiscoveryError):
    """The tool's output is not in the format it documents."""

    reason = "bad-output"


STDERR_TAIL = 300
"""Characters of a failing tool's stderr kept in the error message."""


async def run_tool(argv: Sequence[str], timeout_s: float) -> str:
    """``argv``'s stdout as text; ToolMissingError, ToolFailedError or ToolTimeoutError."""
    try:
        process = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
    except (FileNotFoundError, PermissionError, NotADirectoryError) as exc:
        raise ToolMissingError(f"{argv[0]}: {exc.strerror or exc}") from exc
    try:
        stdout, stderr = await asyncio.wait_for(process.communicate(), timeout_s)
    except BaseException as exc:
        # A hung tool, or an agent stopping mid-call: never leave the child behind.
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await asyncio.shield(process.wait())
        if isinstance(exc, TimeoutError):
            raise ToolTimeoutError(f"{argv[0]} did not finish within {timeout_s:g} s") from None
        raise
    if process.returncode != 0:
        tail = stderr.decode(errors="replace").strip()[-STDERR_TAIL:]
        raise ToolFailedError(f"{argv[0]} exited with {process.returncode}: {tail or 'no output'}")
    return stdout.decode(errors="replace")
