"""The compiled hot path (libs/common/hatch_build.py): the modules it names, and proof that
the proxy-compiled test variant (``./dev test``) runs them compiled.

That variant runs the proxy's suites with ``PYTHONPATH=build/compiled`` and
``FLEXINFER_EXPECT_COMPILED=1``. Were the path wrong, every test would pass on the source
beside the compiled modules and prove nothing about them: here each named module must be
an extension module.
"""

from __future__ import annotations

import importlib
import os
import tomllib
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

import pytest

from flexinfer_testing.repo import repo_root

PACKAGES = ("libs/common", "services/proxy")
"""The packages whose wheels compile part of the proxy's request path."""


def hot_path_modules() -> list[str]:
    """The dotted names of every module a package's build hook compiles."""
    names = []
    for package in PACKAGES:
        root = repo_root() / package
        config = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
        hook = config["tool"]["hatch"]["build"]["targets"]["wheel"]["hooks"]["custom"]
        for path in hook["modules"]:
            assert (root / path).is_file(), f"{package}: {path} is named but missing"
            names.append(path.removeprefix("src/").removesuffix(".py").replace("/", "."))
    return names


def test_the_hook_names_the_request_path_of_both_packages() -> None:
    names = hot_path_modules()
    assert "flexinfer_common.http1.server" in names
    assert "flexinfer_proxy.pipeline" in names
    assert "flexinfer_proxy.transport.h1" in names
    assert len(names) == len(set(names))


@pytest.mark.skipif(
    os.environ.get("FLEXINFER_EXPECT_COMPILED") != "1",
    reason="only in the proxy-compiled variant of ./dev test (FLEXINFER_EXPECT_COMPILED=1)",
)
def test_the_compiled_variant_loads_every_named_module_compiled() -> None:
    pure = []
    for name in hot_path_modules():
        origin = str(importlib.import_module(name).__file__)
        if not any(origin.endswith(suffix) for suffix in EXTENSION_SUFFIXES):
            pure.append(f"{name} ({Path(origin).name})")
    assert pure == [], f"loaded from source, not compiled: {pure}"
