"""Ollama (``ollama/ollama``): ``ollama serve``; the model is pulled, not mounted.

Ollama has no config keys here (spec.config is ignored); the model is the ``ollama://``
source's tag, which the runtime pulls through Ollama's API once the server is up.
"""

from __future__ import annotations

from typing import ClassVar

from flexinfer_common.backends import backend_facts
from flexinfer_controller.backends.base import Backend, EngineSpec, ModelPassing, RenderRequest
from flexinfer_controller.backends.render import (
    ImageRule,
    bind,
    http_probe,
    model_ref,
    require_vendor,
    resolve_image,
    rocm_env,
    served_name,
)

IMAGES = (
    ImageRule("DEFAULT_OLLAMA_IMAGE_GFX1100", vendor="amd", arch_prefix="gfx110"),
    ImageRule("DEFAULT_OLLAMA_IMAGE_GFX906", vendor="amd", arch_prefix="gfx906"),
    ImageRule("DEFAULT_BACKEND_IMAGE_AMD", "ollama/ollama:rocm", vendor="amd"),
    ImageRule("DEFAULT_BACKEND_IMAGE_INTEL", "ollama/ollama:latest", vendor="intel"),
    ImageRule("DEFAULT_BACKEND_IMAGE_MAXWELL", vendor="nvidia", arch_prefix="sm_5"),
    ImageRule(
        "DEFAULT_BACKEND_IMAGE_NVIDIA",
        "ollama/ollama:latest",
        vendor="nvidia",
        extra_env=("DEFAULT_BACKEND_IMAGE",),
    ),
    ImageRule("DEFAULT_BACKEND_IMAGE", "ollama/ollama:latest"),
)


def ollama_host(host: str, port: int, default_port: int) -> str:
    """OLLAMA_HOST: ``host`` alone on the default port (as the operator), else host:port."""
    return host if port == default_port else f"{host}:{port}"


class OllamaBackend(Backend):
    """Ollama: readiness GET / (10/10/5), startup timeout 60 s, no model volume."""

    facts = backend_facts("ollama")
    vendors: ClassVar[frozenset[str]] = frozenset({"nvidia", "amd", "intel"})
    model_passing: ClassVar[ModelPassing] = ModelPassing.PULL
    needs_volume: ClassVar[bool] = False

    def render(self, request: RenderRequest) -> EngineSpec:
        """``serve`` with OLLAMA_HOST and OLLAMA_KEEP_ALIVE=-1 (never unload the model)."""
        require_vendor(self.name, self.vendors, request)
        host, port = bind(request, self.port)
        env = {"OLLAMA_HOST": ollama_host(host, port, self.port), "OLLAMA_KEEP_ALIVE": "-1"}
        if request.vendor == "amd":
            env |= rocm_env(request.arch)
        return EngineSpec(
            backend=self.name,
            image=resolve_image(IMAGES, request),
            command=(),
            args=("serve",),
            env=env,
            host=host,
            port=port,
            served_name=served_name(request.model),
            readiness=http_probe("/", port, 10, 10, 5),
            startup=None,
            startup_timeout_s=self.startup_timeout_s,
            model_mount=None,
            pull=model_ref(request.model.spec.source),
        )
