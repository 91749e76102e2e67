"""vLLM locally: the ``vllm`` executable (``vllm serve MODEL``) or ``python -m`` its server.

``vllm serve`` takes the model as its positional argument, so ``--model M`` moves there;
the importable package runs ``vllm.entrypoints.openai.api_server`` with the rendered args
unchanged (that module takes ``--model``).
"""

from __future__ import annotations

from collections.abc import Mapping

from flexinfer_controller.backends.base import EngineSpec
from flexinfer_controller.backends.launch import InstallProbe, LaunchContext
from flexinfer_controller.backends.local.base import HttpLocalServer


def serve_argv(executable: str, args: tuple[str, ...]) -> tuple[str, ...]:
    """``vllm serve MODEL <args without --model MODEL>``."""
    rest = list(args)
    at = rest.index("--model")
    model = rest[at + 1]
    del rest[at : at + 2]
    return (executable, "serve", model, *rest)


class VllmLocal(HttpLocalServer):
    """vLLM on this machine (Linux with a GPU vLLM supports)."""

    def command(
        self, spec: EngineSpec, ctx: LaunchContext, probe: InstallProbe
    ) -> tuple[tuple[str, ...], Mapping[str, str]] | None:
        """The executable on PATH first, else the package in the engine's interpreter."""
        if (executable := probe.which("vllm")) is not None:
            return serve_argv(executable, spec.args), spec.env
        if probe.has_module(ctx.engine_python, "vllm"):
            argv = (ctx.engine_python, "-m", "vllm.entrypoints.openai.api_server", *spec.args)
            return argv, spec.env
        return None

    def install_hint(self, backend: str) -> str:
        """pip install vllm."""
        return (
            f"backend {backend!r} needs the vllm server: pip install vllm (Linux + GPU), "
            "or run on the kubernetes runtime"
        )
