"""llama.cpp locally: ``llama-server`` from PATH, or llama-cpp-python's server.

``llama-server`` takes the rendered args as they are. ``python -m llama_cpp.server``
(llama-cpp-python) has its own flags: each rendered setting is mapped onto its documented
equivalent; the few with none (``--parallel``, ``--device``, KV-cache types, reasoning
options) are refused rather than dropped, and three that change nothing it would do
differently (``--jinja``, ``--metrics``, ``-fit off``) are left out.
"""

from __future__ import annotations

from collections.abc import Mapping

from flexinfer_controller.backends.base import EngineSpec, UnsupportedBackendError
from flexinfer_controller.backends.launch import InstallProbe, LaunchContext
from flexinfer_controller.backends.local.base import HttpLocalServer

VALUE_FLAGS = {
    "--host": "--host",
    "--port": "--port",
    "--model": "--model",
    "--n-gpu-layers": "--n_gpu_layers",
    "--ctx-size": "--n_ctx",
    "--batch-size": "--n_batch",
    "--ubatch-size": "--n_ubatch",
    "--threads": "--n_threads",
    "--mmproj": "--clip_model_path",
    "--chat-template": "--chat_format",
}
"""llama-server flag -> llama-cpp-python server flag, for flags that take a value."""
SWITCHES = {"--embeddings": ("--embedding", "true")}
DROPPED = {"--jinja": 0, "--metrics": 0, "-fit": 1}
"""Flags with no effect to carry over, with how many values they take."""


def python_server_args(args: tuple[str, ...], served_name: str) -> list[str]:
    """The rendered llama-server args as llama-cpp-python's server flags."""
    out: list[str] = []
    i = 0
    while i < len(args):
        flag = args[i]
        if flag in VALUE_FLAGS:
            out += [VALUE_FLAGS[flag], args[i + 1]]
            i += 2
        elif flag == "--flash-attn":
            out += ["--flash_attn", "true" if args[i + 1] == "on" else "false"]
            i += 2
        elif flag in SWITCHES:
            out += list(SWITCHES[flag])
            i += 1
        elif flag in DROPPED:
            i += 1 + DROPPED[flag]
        else:
            raise UnsupportedBackendError(
                f"llama-cpp-python's server has no equivalent of llama-server's {flag}: unset "
                "that spec.config key, or put llama.cpp's llama-server on PATH"
            )
    return [*out, "--model_alias", served_name]


class LlamaCppLocal(HttpLocalServer):
    """llama.cpp on this machine: CPU or GPU, whatever the installed build supports."""

    def command(
        self, spec: EngineSpec, ctx: LaunchContext, probe: InstallProbe
    ) -> tuple[tuple[str, ...], Mapping[str, str]] | None:
        """``llama-server`` first (same args), else ``python -m llama_cpp.server``."""
        if (executable := probe.which("llama-server")) is not None:
            return (executable, *spec.args), spec.env
        python = ctx.engine_python
        if probe.has_module(python, "llama_cpp") and probe.has_module(python, "sse_starlette"):
            args = python_server_args(spec.args, spec.served_name)
            return (python, "-m", "llama_cpp.server", *args), spec.env
        return None

    def readiness_path(self, spec: EngineSpec, argv: tuple[str, ...]) -> str:
        """llama-server's /health; llama-cpp-python's server has none: /v1/models."""
        if argv[1:3] == ("-m", "llama_cpp.server"):
            return "/v1/models"
        return super().readiness_path(spec, argv)

    def install_hint(self, backend: str) -> str:
        """llama-cpp-python with its server extra, or llama-server."""
        return (
            f"backend {backend!r} needs a llama.cpp server: pip install "
            "'llama-cpp-python[server]', or put llama.cpp's llama-server on PATH, "
            "or run on the kubernetes runtime"
        )
