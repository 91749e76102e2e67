"""Stand-ins for the third-party servers the local runtime launches (vLLM, llama-cpp-python's
server, Ollama), installed where the real ones would be found: executables in a bin/ for
PATH, packages in a site/ for PYTHONPATH. Each parses its real CLI strictly, records its
argv, and serves the minimal real API. Used by tests only.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flexinfer_testing.backend_servers.http import read_records

_TESTS = Path(__file__).resolve().parents[2]
"""The directory holding flexinfer_testing: a stand-in process puts it on sys.path."""

_LAUNCH = """#!{python}
import sys
sys.path.insert(0, {tests!r})
from flexinfer_testing.backend_servers import {module}
sys.exit({module}.{function}(sys.argv[1:], {records!r}))
"""

EXECUTABLES = {"vllm": ("vllm_server", "main_cli"), "ollama": ("ollama_server", "main")}
MODULES = {
    "vllm/entrypoints/openai/api_server.py": ("vllm_server", "main_module"),
    "llama_cpp/server/__main__.py": ("llamacpp_server", "main"),
}
MARKERS = ("sse_starlette/__init__.py",)
"""Empty packages whose presence says the server extra is installed, as
``pip install 'llama-cpp-python[server]'`` would leave them."""


@dataclass(frozen=True, slots=True)
class StandIns:
    """Where the stand-ins were installed, and what they recorded."""

    bin_dir: Path
    """Put first on PATH: ``vllm`` and ``ollama``."""
    site_dir: Path
    """Put on PYTHONPATH: the ``vllm`` and ``llama_cpp`` packages (with ``sse_starlette``)."""
    records_dir: Path

    def launches(self, name: str) -> list[dict[str, Any]]:
        """Recorded launches of ``name`` (vllm, vllm-api-server, llama_cpp.server, ollama)."""
        return read_records(self.records_dir, name)


def _script(module: str, function: str, records: Path) -> str:
    return _LAUNCH.format(
        python=sys.executable, tests=str(_TESTS), module=module, function=function,
        records=str(records),
    )  # fmt: skip


def install_standins(root: Path) -> StandIns:
    """Write the executables and packages under ``root``; nothing is on any path yet."""
    out = StandIns(root / "bin", root / "site", root / "records")
    out.bin_dir.mkdir(parents=True)
    for name, (module, function) in EXECUTABLES.items():
        path = out.bin_dir / name
        path.write_text(_script(module, function, out.records_dir))
        path.chmod(0o755)
    for relative, (module, function) in MODULES.items():
        _package_file(out.site_dir, relative, _script(module, function, out.records_dir))
    for relative in MARKERS:
        _package_file(out.site_dir, relative, "")
    return out


def _package_file(site: Path, relative: str, text: str) -> None:
    """Write ``site/relative``, with an ``__init__.py`` in each package above it."""
    path = site / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    for parent in path.relative_to(site).parents:
        if parent != Path("."):
            (site / parent / "__init__.py").touch()
    path.write_text(text)
