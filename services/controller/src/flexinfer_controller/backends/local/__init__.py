"""Backends on the local runtime: the installed servers, as subprocesses on loopback."""

from __future__ import annotations

from pathlib import Path

from flexinfer_common.api import Model
from flexinfer_controller.backends.base import Backend, RenderRequest
from flexinfer_controller.backends.launch import LaunchContext, LaunchSpec
from flexinfer_controller.backends.local.base import (
    BackendNotInstalledError,
    LocalServer,
)
from flexinfer_controller.backends.local.llamacpp import LlamaCppLocal
from flexinfer_controller.backends.local.ollama import OllamaLocal
from flexinfer_controller.backends.local.reference import ReferenceLocal
from flexinfer_controller.backends.local.vllm import VllmLocal


def local_servers() -> dict[str, LocalServer]:
    """Backends that can run here when installed, by canonical name."""
    return {
        "reference": ReferenceLocal(),
        "vllm": VllmLocal(),
        "llamacpp": LlamaCppLocal(),
        "ollama": OllamaLocal(),
    }


def local_vendor(model: Model) -> str | None:
    """spec.gpu.vendor as declared (cpu when spec.gpu is omitted); None for ``auto``."""
    vendor = model.spec.gpu_or_default.vendor.value
    return None if vendor == "auto" else vendor


def launch_locally(
    backend: Backend, model: Model, model_dir: Path | None, ctx: LaunchContext
) -> LaunchSpec:
    """The LaunchSpec for ``model`` here; BackendNotInstalledError naming what to install."""
    server = local_servers().get(backend.name)
    request = RenderRequest(
        model=model,
        model_location=str(model_dir) if model_dir is not None else None,
        vendor=local_vendor(model) or ctx.vendor,
        arch=ctx.arch,
        environ=ctx.environ,
        lora_roots=ctx.lora_roots,
        registry=ctx.registry,
        registry_token=ctx.registry_token,
    )
    if server is None:
        image = backend.render(request).image
        raise BackendNotInstalledError(
            f"backend {backend.name!r} has no local server: it runs from its image "
            f"({image}) on the kubernetes runtime"
        )
    return server.launch(backend, request, ctx, ctx.probe)
