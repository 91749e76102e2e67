"""Whether an optional loader package is importable, without importing it."""

from __future__ import annotations

import importlib.util


def missing_package(module: str) -> str | None:
    """A reason when ``module`` cannot be imported here, else None."""
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        found = False
    return None if found else f"{module} is not installed"
