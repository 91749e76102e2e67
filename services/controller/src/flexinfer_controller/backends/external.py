"""Backends of the FlexInfer operator that need container images: known, not yet runnable."""

from __future__ import annotations

from pathlib import Path

from flexinfer_common.api import Model
from flexinfer_controller.backends.base import (
    Backend,
    LaunchContext,
    LaunchSpec,
    UnsupportedBackendError,
)


class ExternalBackend(Backend):
    """A seed backend (vllm, ollama, ...) whose launch on this runtime is not implemented."""

    def __init__(self, name: str, aliases: tuple[str, ...] = ()) -> None:
        self.name = name
        self.aliases = aliases

    def launch(self, model: Model, model_dir: Path, ctx: LaunchContext) -> LaunchSpec:
        """Always refuses: these backends run from container images on Kubernetes."""
        raise UnsupportedBackendError(
            f"backend {self.name!r} is not runnable on the {ctx.runtime!r} runtime yet; "
            "use backend 'reference' locally, or the kubernetes runtime when it lands"
        )


EXTERNAL_BACKENDS: dict[str, tuple[str, ...]] = {
    "ollama": (),
    "vllm": (),
    "mlc-llm": ("mlc", "mlc_llm"),
    "llamacpp": ("llama.cpp", "llama-cpp", "llama_cpp"),
    "diffusers": (),
    "comfyui": ("comfy", "comfy-ui", "comfy_ui"),
    "vllm-omni": ("vllm-diffusion", "vllm_omni"),
}
"""Names and aliases from the operator's backend registry (reference §5)."""
