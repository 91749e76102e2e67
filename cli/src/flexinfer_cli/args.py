"""Argument parsing shared by the subcommands."""

from __future__ import annotations

import argparse


def parser(prog: str, description: str) -> argparse.ArgumentParser:
    """An ArgumentParser for ``flexinfer PROG`` (argparse prints one line and exits 2)."""
    return argparse.ArgumentParser(prog=f"flexinfer {prog}", description=description)
