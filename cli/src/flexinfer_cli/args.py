"""Argument parsing shared by the subcommands."""

from __future__ import annotations

import argparse


def parser(prog: str, description: str) -> argparse.ArgumentParser:
    """An ArgumentParser for ``flexinfer PROG`` (argparse prints one line and exits 2)."""
    return argparse.ArgumentParser(prog=f"flexinfer {prog}", description=description)


def subcommands(
    prog: str, description: str
) -> tuple[argparse.ArgumentParser, argparse._SubParsersAction[argparse.ArgumentParser]]:
    """A parser for ``flexinfer PROG COMMAND ...``; its subcommands are added to the second."""
    top = parser(prog, description)
    commands = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    return top, commands
