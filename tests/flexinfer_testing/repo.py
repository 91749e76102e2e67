"""Where the monorepo's checkout is, for tests that read its files (manifests, protos)."""

from __future__ import annotations

from pathlib import Path


def repo_root() -> Path:
    """The monorepo root: the nearest parent holding k8s/, libs/ and the root pyproject."""
    for parent in Path(__file__).resolve().parents:
        if (
            (parent / "k8s").is_dir()
            and (parent / "libs").is_dir()
            and (parent / "pyproject.toml").is_file()
        ):
            return parent
    raise AssertionError(f"no repository root above {__file__}")
