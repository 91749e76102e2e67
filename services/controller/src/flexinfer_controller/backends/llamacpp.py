"""llama.cpp's ``llama-server``: GGUF models on NVIDIA, AMD or the CPU.

Args follow llama-server's documented CLI and the operator's config keys (reference §5);
keys not listed are ignored. ``--model`` is the model location joined with config
``ggufFile`` (or ``modelFile``) when the location is a directory; a file name with ``..``
is refused. On the CPU no layer is offloaded (``--n-gpu-layers 0``).
"""

from __future__ import annotations

import posixpath
from typing import ClassVar

from flexinfer_common.backends import backend_facts
from flexinfer_common.errors import InvalidSpecError
from flexinfer_controller.backends.base import Backend, EngineSpec, RenderRequest
from flexinfer_controller.backends.render import (
    Config,
    ImageRule,
    flag_args,
    http_probe,
    model_arg,
    require_vendor,
    resolve_image,
    rocm_env,
    served_name,
)

IMAGES = (
    ImageRule("DEFAULT_LLAMA_CPP_IMAGE_GFX1100", vendor="amd", arch_prefix="gfx110"),
    ImageRule("DEFAULT_LLAMA_CPP_IMAGE_GFX906", vendor="amd", arch_prefix="gfx906"),
    ImageRule(
        "DEFAULT_LLAMA_CPP_IMAGE_AMD", "ghcr.io/ggerganov/llama.cpp:server-rocm", vendor="amd"
    ),
    ImageRule("DEFAULT_LLAMA_CPP_IMAGE_CPU", "ghcr.io/ggerganov/llama.cpp:server", vendor="cpu"),
    ImageRule("DEFAULT_LLAMA_CPP_IMAGE_MAXWELL", vendor="nvidia", arch_prefix="sm_5"),
    ImageRule("DEFAULT_LLAMA_CPP_IMAGE", "ghcr.io/ggerganov/llama.cpp:server-cuda"),
)
COMMAND = ("/opt/src/llama.cpp/build/bin/llama-server",)
ALL_LAYERS = 999

_FLAGS = (
    ("batchSize", "--batch-size", "int"),
    ("threads", "--threads", "int"),
)
_FLAGS_AFTER_FLASH = (
    ("mmproj", "--mmproj", "str"),
    ("chatTemplate", "--chat-template", "str"),
    ("jinja", "--jinja", "bool"),
)
_FLAGS_AFTER_DEVICE = (
    ("parallel", "--parallel", "int"),
    ("cacheTypeK", "--cache-type-k", "str"),
    ("cacheTypeV", "--cache-type-v", "str"),
    ("ubatchSize", "--ubatch-size", "int"),
    ("reasoningFormat", "--reasoning-format", "str"),
)


def gguf_path(location: str, config: Config) -> str:
    """``location`` joined with config ggufFile/modelFile unless it names the file already."""
    name = (config.string("ggufFile") or config.string("modelFile")).strip().lstrip("/")
    if not name:
        return location
    if ".." in name.split("/"):
        raise InvalidSpecError("spec.config.ggufFile must not contain '..'", field="ggufFile")
    base = posixpath.basename(location)
    if base == posixpath.basename(name) or base.lower().endswith(".gguf"):
        return location
    return posixpath.join(location, name)


class LlamaCppBackend(Backend):
    """llama-server: readiness GET /health (10/10/5), startup timeout 60 s."""

    facts = backend_facts("llamacpp")
    vendors: ClassVar[frozenset[str]] = frozenset({"nvidia", "amd", "cpu"})
    metrics_path: ClassVar[str | None] = "/metrics"
    """Served when config.metrics is true (``--metrics``)."""

    def render(self, request: RenderRequest) -> EngineSpec:
        """The llama-server container; config.port overrides 8080 unless the runtime binds."""
        require_vendor(self.name, self.vendors, request)
        config = Config(request.model.spec.config)
        port = request.port if request.port is not None else config.integer("port", self.port)
        return EngineSpec(
            backend=self.name,
            image=resolve_image(IMAGES, request),
            command=COMMAND,
            args=tuple(self.args(request, config, port)),
            env=rocm_env(request.arch) if request.vendor == "amd" else {},
            host=request.host,
            port=port,
            served_name=served_name(request.model),
            readiness=http_probe("/health", port, 10, 10, 5),
            startup=None,
            startup_timeout_s=self.startup_timeout_s,
            model_mount=request.model_location,
        )

    @staticmethod
    def args(request: RenderRequest, config: Config, port: int) -> list[str]:
        """``--host --port --model --n-gpu-layers`` then the config flags, operator order."""
        location = request.model_location
        model = gguf_path(location, config) if location else model_arg(request)
        cpu = request.vendor == "cpu"
        layers = 0 if cpu else (config.integer("nGPULayers") or ALL_LAYERS)
        args = ["--host", request.host, "--port", str(port), "--model", model]
        args += flag_args(config, (("contextSize", "--ctx-size", "int"),))
        args += ["--n-gpu-layers", str(layers), *flag_args(config, _FLAGS)]
        if not cpu and config.boolean("flashAttention"):
            args += ["--flash-attn", "on"]
        args += flag_args(config, _FLAGS_AFTER_FLASH)
        if device := config.string("device") or config.string("gpuDeviceOrdinal"):
            args += ["--device", device]
        args += flag_args(config, _FLAGS_AFTER_DEVICE)
        if config.has("reasoningBudget"):
            args += ["--reasoning-budget", str(config.integer("reasoningBudget"))]
        args += flag_args(
            config, (("embedding", "--embeddings", "bool"), ("metrics", "--metrics", "bool"))
        )
        if config.boolean("fitOff"):
            args += ["-fit", "off"]
        return args
