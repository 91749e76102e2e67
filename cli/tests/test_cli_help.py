"""Every ``--help`` of every subcommand: exit 0, the name the user typed, plain text."""

from __future__ import annotations

import re
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest

from flexinfer_testing.stack import flexinfer_command

COMMANDS = [
    (),
    ("up",),
    ("model",),
    ("model", "generate"),
    ("crd",),
    ("crd", "generate"),
    ("docs",),
    ("docs", "config"),
    ("mx",),
    ("mx", "health"),
    ("mx", "ping"),
    ("mx", "model"),
    ("mx", "model", "download"),
    ("mx", "model", "list-files"),
    ("mx", "model", "clear"),
    ("mx", "model", "validate"),
    ("bench",),
    ("bench", "tps"),
    ("flash-load",),
    ("flash-load", "cleanup"),
    ("proxy",),
    ("controller",),
    ("scheduler",),
    ("registry",),
    ("agent",),
    ("engine",),
    ("engine", "serve"),
    ("engine", "generate"),
]

RST = re.compile(r"``|:\w+:`|`[^`\s][^`]*`_?")
"""Backticks of any kind: reStructuredText literals, roles and links read as noise."""

OPTION = re.compile(r"^  (-\S+(?: \S+)*?)(?:\s{2,}\S.*)?$")
"""An option's line in argparse's help: the flags, then (after two spaces) its help."""


def _help(command: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        flexinfer_command(*command, "--help"),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture(scope="module")
def helps() -> dict[tuple[str, ...], subprocess.CompletedProcess[str]]:
    with ThreadPoolExecutor(4) as pool:
        return dict(zip(COMMANDS, pool.map(_help, COMMANDS), strict=True))


def _undocumented(text: str) -> list[str]:
    """Options listed without a help text (neither on their line nor the next)."""
    lines = text.splitlines()
    missing = []
    for index, line in enumerate(lines):
        match = OPTION.match(line)
        if match is None or line.strip().startswith(("-h,", "--help")):
            continue
        if not re.search(r"\S\s{2,}\S", line.strip()):
            following = lines[index + 1] if index + 1 < len(lines) else ""
            if not re.match(r"^\s{6,}\S", following):
                missing.append(match.group(1))
    return missing


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "flexinfer")
def test_help_is_a_real_plain_text_help(
    helps: dict[tuple[str, ...], subprocess.CompletedProcess[str]], command: tuple[str, ...]
) -> None:
    done = helps[command]
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    prog = " ".join(("flexinfer", *command))
    assert done.stdout.startswith(f"usage: {prog} "), done.stdout[:200]
    assert not RST.findall(done.stdout), RST.findall(done.stdout)
    assert "flexinfer-" not in done.stdout, "a service's own script name leaked into the help"
    assert _undocumented(done.stdout) == []


def test_group_commands_list_their_subcommands(
    helps: dict[tuple[str, ...], subprocess.CompletedProcess[str]],
) -> None:
    assert "generate" in helps[("model",)].stdout
    assert "--check" in helps[("crd", "generate")].stdout
    usage = helps[("crd",)].stdout.split("\n\n")[0]
    assert usage.count("generate") == 0, "the crd usage line repeats its subcommand"
    for action in ("download", "list-files", "clear", "validate"):
        assert action in helps[("mx", "model")].stdout
    for sub in ("serve", "generate"):
        assert sub in helps[("engine",)].stdout


@pytest.mark.parametrize("command", [("model",), ("crd",), ("engine",)])
def test_a_group_without_its_subcommand_is_a_usage_error(command: tuple[str, ...]) -> None:
    done = subprocess.run(
        flexinfer_command(*command), capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 2
    assert done.stderr.startswith(f"usage: flexinfer {' '.join(command)} ")
    assert "required: COMMAND" in done.stderr
