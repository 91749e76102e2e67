"""Fake command-line tools: small executables that print a recorded output for the exact argv
the real tool is called with, and refuse any other (as the real one refuses a bad flag)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

FakeTool = Callable[..., str]
"""``fake_tool(name, {"args": "fixture/path"}, exit_code=0, hang=False)`` -> the tool's path."""

_SCRIPT = """#!{python}
import pathlib, signal, sys
RESPONSES = {responses!r}
args = " ".join(sys.argv[1:])
if {hang!r}:
    signal.pause()  # a hung tool: answers nothing until the caller's timeout kills it
if args not in RESPONSES:
    print("unknown option: " + args, file=sys.stderr)
    sys.exit(2)
sys.stdout.write(pathlib.Path(RESPONSES[args]).read_text())
sys.exit({exit_code!r})
"""


def fake_tool_maker(bin_dir: Path, fixtures: Path) -> FakeTool:
    """A maker of fake tools in ``bin_dir`` whose recorded outputs are files under ``fixtures``."""

    def make(
        name: str, responses: dict[str, str], *, exit_code: int = 0, hang: bool = False
    ) -> str:
        path = bin_dir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        files = {args: str(fixtures / fixture) for args, fixture in responses.items()}
        script = _SCRIPT.format(
            python=sys.executable, responses=files, hang=hang, exit_code=exit_code
        )
        path.write_text(script)
        path.chmod(0o755)
        return str(path)

    return make
