"""The reference engine (``python -m flexinfer_engine serve``): runnable on the local runtime."""

from __future__ import annotations

from pathlib import Path

from flexinfer_common.api import Model
from flexinfer_controller.backends.base import (
    Backend,
    LaunchContext,
    LaunchSpec,
    UnsupportedBackendError,
)


def served_name(model: Model) -> str:
    """spec.litellm.servedModelName, or the Model's name."""
    litellm = model.spec.litellm
    return (litellm.served_model_name if litellm else None) or model.metadata.name


class ReferenceBackend(Backend):
    """FlexInfer's own small engine; it reports readiness on a file descriptor."""

    name = "reference"
    aliases = ("flexinfer", "flexinfer-engine")

    def launch(self, model: Model, model_dir: Path, ctx: LaunchContext) -> LaunchSpec:
        """``engine_python -m flexinfer_engine serve`` on a free loopback port."""
        if ctx.runtime != "local":
            raise UnsupportedBackendError(
                f"backend {self.name!r} is not runnable on the {ctx.runtime!r} runtime yet"
            )
        name = served_name(model)
        argv = (
            ctx.engine_python, "-m", "flexinfer_engine", "serve",
            "--model-dir", str(model_dir),
            "--served-model-name", name,
            "--host", ctx.host,
            "--port", "0",
        )  # fmt: skip
        return LaunchSpec(argv=argv, served_name=name)
