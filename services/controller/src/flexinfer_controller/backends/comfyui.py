"""ComfyUI (``python main.py``): workflow image generation; models through its volume.

Args follow ComfyUI's documented CLI and the operator's config keys: ``--listen --port``,
``--enable-cors-header`` (config enableCORS, on by default), modelsPath, customNodesPath
and outputDirectory. Unknown config keys are ignored.
"""

from __future__ import annotations

from typing import ClassVar

from flexinfer_common.backends import backend_facts
from flexinfer_controller.backends.base import Backend, EngineSpec, ModelPassing, RenderRequest
from flexinfer_controller.backends.render import (
    Config,
    ImageRule,
    bind,
    flag_args,
    require_vendor,
    resolve_image,
    rocm_env,
    served_name,
    tcp_probe,
)

IMAGES = (
    ImageRule(
        "DEFAULT_COMFYUI_IMAGE_GFX1100",
        "registry.harbor.lan/flexinfer/comfyui:rocm-gfx1100",
        vendor="amd",
        arch_prefix="gfx110",
    ),
    ImageRule(
        "DEFAULT_COMFYUI_IMAGE_GFX906",
        "registry.harbor.lan/flexinfer/comfyui:rocm-gfx906",
        vendor="amd",
        arch_prefix="gfx906",
    ),
    ImageRule(
        "DEFAULT_COMFYUI_IMAGE_AMD",
        "registry.harbor.lan/library/comfyui:rocm6.2.3-v8",
        vendor="amd",
    ),
    ImageRule("DEFAULT_COMFYUI_IMAGE", "comfyanonymous/comfyui:latest"),
)
COMMAND = ("python", "main.py")
_FLAGS = (
    ("modelsPath", "--extra-model-paths-config", "str"),
    ("customNodesPath", "--custom-path", "str"),
    ("outputDirectory", "--output-directory", "str"),
)


class ComfyUIBackend(Backend):
    """ComfyUI: readiness a TCP check (10/10/5; it speaks WebSocket), startup 180 s."""

    facts = backend_facts("comfyui")
    model_passing: ClassVar[ModelPassing] = ModelPassing.VOLUME
    default_idle_timeout_s: ClassVar[float] = 600.0
    startup_timeout_s: ClassVar[float] = 180.0

    def render(self, request: RenderRequest) -> EngineSpec:
        """``python main.py --listen H --port P`` plus the config flags."""
        require_vendor(self.name, self.vendors, request)
        config = Config(request.model.spec.config)
        host, port = bind(request, self.port)
        args = ["--listen", host, "--port", str(port)]
        if config.boolean("enableCORS", True):
            args.append("--enable-cors-header")
        args += flag_args(config, _FLAGS)
        env = {"COMFYUI_OUTPUT_DIRECTORY": "/output", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
        arch = request.arch or ""
        if request.vendor == "amd":
            env |= rocm_env(arch)
            if arch.startswith("gfx110"):
                env["MIOPEN_FIND_MODE"] = config.env_text("miopenFindMode", "2")
            if arch.startswith("gfx906"):
                env["PYTORCH_HIP_ALLOC_CONF"] = (
                    "garbage_collection_threshold:0.8,max_split_size_mb:256"
                )
                env["ENABLE_ATTENTION_SLICING"] = "1"
        return EngineSpec(
            backend=self.name,
            image=resolve_image(IMAGES, request),
            command=COMMAND,
            args=tuple(args),
            env=env,
            host=host,
            port=port,
            served_name=served_name(request.model),
            readiness=tcp_probe(port, 10, 10, 5),
            startup=None,
            startup_timeout_s=self.startup_timeout_s,
            model_mount=request.model_location,
        )
