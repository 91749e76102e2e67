"""A wheel build hook that compiles a package's request hot path with mypyc.

The proxy's per-request work is about 50 µs of interpreted Python at one connection,
where vllm-router spends about 25 µs of Rust (bench/RESULTS.md, "the floor of a Python
proxy"); compiled, the same modules take about 30 µs. The modules stay plain Python in the
wheel too: an extension module beside its ``.py`` is what the import system loads first,
so a wheel built without a compiler is the same code, only slower.

Which modules: ``modules`` in the package's ``[tool.hatch.build.targets.wheel.hooks.custom]``
table, paths relative to the package root. When: ``FLEXINFER_COMPILE``

- ``auto`` (the default): compile when mypyc (it comes with mypy) and a C compiler are
  here, else build a pure wheel and say why;
- ``1``: compile or fail the build (release images, CI);
- ``0``: never.

Editable installs (``./dev setup``) are never compiled: a stale extension would shadow
the source being edited. mypy needs the package's imports to type the compiled code, so
build with ``pip wheel --no-build-isolation`` from an environment that has them (``./dev
compile``); in an isolated build, mypyc is not there and ``auto`` builds a pure wheel.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

MODES = {"auto", "0", "1"}
MYPY_CONFIG = """\
[mypy]
python_version = 3.11
# Third-party stubs are not all installed where wheels are built; what is untyped stays
# a plain Python object in the compiled code, which is slower but still right.
ignore_missing_imports = True
follow_imports = silent
"""


class CompileError(RuntimeError):
    """The hot path was asked to be compiled (FLEXINFER_COMPILE=1) and could not be."""


class CustomBuildHook(BuildHookInterface):  # type: ignore[type-arg]
    """Adds the compiled modules of ``modules`` to a standard (non-editable) wheel."""

    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        """Compile before the wheel is assembled, when asked and able to."""
        modules = list(self.config.get("modules", []))
        mode = os.environ.get("FLEXINFER_COMPILE", "auto").strip() or "auto"
        if mode not in MODES:
            raise CompileError(f"FLEXINFER_COMPILE must be auto, 1 or 0, not {mode!r}")
        if self.target_name != "wheel" or version == "editable" or mode == "0" or not modules:
            return
        missing = why_not_compilable()
        if missing is not None:
            if mode == "1":
                raise CompileError(f"FLEXINFER_COMPILE=1 but {missing}")
            self.app.display_warning(f"building a pure-Python wheel: {missing}")
            return
        out = self._scratch = Path(tempfile.mkdtemp(prefix="flexinfer-mypyc-"))
        built = compile_modules(Path(self.root), modules, out / "build")
        for path in built:
            relative = path.relative_to(out / "build" / "lib").as_posix()
            build_data["force_include"][str(path)] = relative
        build_data["pure_python"] = False
        build_data["infer_tag"] = True
        self.app.display_info(f"compiled {len(modules)} modules with mypyc")

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        """The wheel holds the compiled files now: drop the scratch directory."""
        scratch = getattr(self, "_scratch", None)
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)


def why_not_compilable() -> str | None:
    """What is missing to compile here, or None."""
    try:
        import mypyc.build  # noqa: F401
    except ImportError:
        return "mypyc is not installed in the build environment (pip install mypy)"
    compiler = c_compiler()
    if shutil.which(compiler) is None:
        return f"no C compiler ({compiler}) on PATH"
    return None


def c_compiler() -> str:
    """The compiler setuptools will run: ``$CC``, else the one Python was built with."""
    return (os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc").split()[0]


def compile_modules(root: Path, modules: list[str], out: Path) -> list[Path]:
    """Compile ``modules`` (paths under ``root``) into ``out/lib``; the files built."""
    from mypyc.build import mypycify
    from setuptools import Distribution  # type: ignore[import-untyped]

    sources = [(root / m).resolve() for m in modules]
    absent = [str(s) for s in sources if not s.is_file()]
    if absent:
        raise CompileError(f"modules to compile are missing: {', '.join(absent)}")
    out.mkdir(parents=True)
    config = out / "mypy.ini"
    config.write_text(MYPY_CONFIG)
    # mypy names each module from the packages above its file (src/ has no __init__.py).
    with contextlib.chdir(out), _quiet_argv():
        extensions = mypycify(
            ["--config-file", str(config), *map(str, sources)],
            opt_level="3",
            target_dir=str(out / "c"),
        )
        dist = Distribution({"name": "mypyc-hot-path", "ext_modules": extensions})
        build: Any = dist.get_command_obj("build_ext")
        build.build_lib = str(out / "lib")
        build.build_temp = str(out / "tmp")
        build.ensure_finalized()
        build.run()
    return sorted(p for p in (out / "lib").rglob("*") if p.is_file())


@contextlib.contextmanager
def _quiet_argv() -> Iterator[None]:
    """setuptools reads sys.argv for its own command line: give it none."""
    before = sys.argv
    sys.argv = [before[0] if before else "build"]
    try:
        yield
    finally:
        sys.argv = before


if __name__ == "__main__":
    # ./dev asks the same question before it schedules a compile: one answer for both.
    reason = why_not_compilable()
    if reason is not None:
        print(reason, file=sys.stderr)
    sys.exit(0 if reason is None else 1)
