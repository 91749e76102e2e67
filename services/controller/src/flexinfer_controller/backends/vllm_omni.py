"""vLLM-Omni: vLLM for image, audio and video generation; the image's ``vllm serve``.

Args are vLLM's (a subset, per the operator); prefix caching renders both ways, and
``vllmEngineVersion`` v0/v1 sets VLLM_USE_V1 on AMD. Unknown config keys are ignored.
"""

from __future__ import annotations

from typing import ClassVar

from flexinfer_common.backends import backend_facts
from flexinfer_controller.backends.base import Backend, EngineSpec, RenderRequest
from flexinfer_controller.backends.render import (
    Config,
    ImageRule,
    bind,
    flag_args,
    http_probe,
    http_startup_probe,
    model_arg,
    require_vendor,
    resolve_image,
    rocm_env,
)
from flexinfer_controller.backends.vllm import VllmBackend, common_env, tool_args

_GFX1100 = "registry.harbor.lan/flexinfer/vllm-omni:rocm-gfx1100"
IMAGES = (
    ImageRule("DEFAULT_VLLM_OMNI_IMAGE_GFX1100", _GFX1100, vendor="amd", arch_prefix="gfx110"),
    ImageRule("DEFAULT_VLLM_OMNI_IMAGE_AMD", _GFX1100, vendor="amd"),
    ImageRule("DEFAULT_VLLM_OMNI_IMAGE", "vllm/vllm-openai:latest"),
)

_FLAGS = (
    ("dtype", "--dtype", "str"),
    ("maxModelLen", "--max-model-len", "int"),
    ("gpuMemoryUtilization", "--gpu-memory-utilization", "str"),
    ("trustRemoteCode", "--trust-remote-code", "bool"),
    ("maxNumSeqs", "--max-num-seqs", "int"),
    ("maxNumBatchedTokens", "--max-num-batched-tokens", "int"),
    ("enforceEager", "--enforce-eager", "bool"),
    ("cpuOffloadGb", "--cpu-offload-gb", "int"),
    ("numGpuBlocksOverride", "--num-gpu-blocks-override", "int"),
    ("quantization", "--quantization", "str"),
    ("tokenizer", "--tokenizer", "str"),
)


class VllmOmniBackend(Backend):
    """vLLM-Omni: readiness GET /health (0/5/3) after a /health startup probe; 300 s."""

    facts = backend_facts("vllm-omni")
    # No ``lora``: vLLM-Omni's diffusion stages take an adapter per request (lora_path),
    # and its documented server has no runtime load/unload route to declare.
    metrics_path: ClassVar[str | None] = "/metrics"
    default_idle_timeout_s: ClassVar[float] = 600.0
    startup_timeout_s: ClassVar[float] = 300.0

    def render(self, request: RenderRequest) -> EngineSpec:
        """The vLLM-Omni container (image entrypoint ``vllm serve``)."""
        require_vendor(self.name, self.vendors, request)
        host, port = bind(request, self.port)
        config = Config(request.model.spec.config)
        args = ["--host", host, "--port", str(port), "--model", model_arg(request)]
        args += flag_args(config, _FLAGS)
        args += ["--served-model-name", VllmBackend.served(request)]
        args += flag_args(config, (("kvCacheDtype", "--kv-cache-dtype", "str"),))
        if config.has("enablePrefixCaching"):
            on = config.boolean("enablePrefixCaching", True)
            args.append("--enable-prefix-caching" if on else "--no-prefix-caching")
        args += tool_args(config)
        args += flag_args(
            config,
            (
                ("reasoningParser", "--reasoning-parser", "str"),
                ("disableLogStats", "--disable-log-stats", "bool"),
            ),
        )
        return EngineSpec(
            backend=self.name,
            image=resolve_image(IMAGES, request),
            command=(),
            args=tuple(args),
            env=self.env(request, config),
            host=host,
            port=port,
            served_name=VllmBackend.served(request),
            readiness=http_probe("/health", port, 0, 5, 3),
            startup=http_startup_probe("/health", port, self.startup_timeout_s),
            startup_timeout_s=self.startup_timeout_s,
            model_mount=request.model_location,
        )

    @staticmethod
    def env(request: RenderRequest, config: Config) -> dict[str, str]:
        """CUDA_DEVICE_ORDER; on AMD ROCm, VLLM_USE_V1, flash attention and AITER."""
        env = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
        if request.vendor == "amd":
            env |= rocm_env(request.arch)
            version = config.string("vllmEngineVersion")
            if version in ("v0", "v1"):
                env["VLLM_USE_V1"] = version[1]
            if config.boolean("enableFlashAttention"):
                env["VLLM_USE_TRITON_FLASH_ATTN"] = "1"
            arch = request.arch or ""
            if config.boolean("enableAiter") and arch.startswith(("gfx110", "gfx942")):
                env["VLLM_ROCM_USE_AITER"] = "1"
        return env | common_env(config)
