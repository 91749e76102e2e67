"""Reading Dockerfiles without a Docker engine: instructions, stages, pip installs."""

from __future__ import annotations

import re
import shlex
from pathlib import Path


def instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", path.read_text(encoding="utf-8"))
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def stage_instructions(path: Path) -> list[tuple[str | None, list[tuple[str, str]]]]:
    """Each build stage's name (None when unnamed) and its instructions, FROM first."""
    out: list[tuple[str | None, list[tuple[str, str]]]] = []
    for word, args in instructions(path):
        if word == "FROM":
            parts = args.split()
            name = parts[2] if len(parts) == 3 and parts[1].upper() == "AS" else None
            out.append((name, []))
        out[-1][1].append((word, args))
    return out


def stages(path: Path) -> list[str]:
    """The named build stages (``--target`` values)."""
    return [name for name, _ in stage_instructions(path) if name is not None]


def pip_installs(run: str) -> list[list[str]]:
    """The argument lists of every ``pip install`` in one RUN line (``&&``-joined)."""
    out = []
    for command in re.split(r"&&|;", run):
        words = shlex.split(command)
        if words[:2] == ["pip", "install"]:
            out.append(words[2:])
    return out
