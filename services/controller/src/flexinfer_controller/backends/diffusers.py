"""The Diffusers API server: image generation, configured by environment variables only.

No args: ``MODEL_ID``/``MODEL`` name the model (its location when mounted), ``PORT`` the
port, and each known config key becomes one variable (the operator's mapping, reference
§5). Unknown config keys are ignored; values must not contain NUL or line breaks.
"""

from __future__ import annotations

from typing import ClassVar

from flexinfer_common.backends import backend_facts
from flexinfer_controller.backends.base import Backend, EngineSpec, ModelPassing, RenderRequest
from flexinfer_controller.backends.render import (
    Config,
    ImageRule,
    bind,
    http_startup_probe,
    model_arg,
    require_vendor,
    resolve_image,
    rocm_env,
    served_name,
    tcp_probe,
)

IMAGES = (
    ImageRule("DEFAULT_DIFFUSERS_IMAGE_GFX1100", vendor="amd", arch_prefix="gfx110"),
    ImageRule("DEFAULT_DIFFUSERS_IMAGE_GFX906", vendor="amd", arch_prefix="gfx906"),
    ImageRule(
        "DEFAULT_DIFFUSERS_IMAGE_AMD",
        "registry.harbor.lan/library/diffusers-api:rocm-latest",
        vendor="amd",
    ),
    ImageRule("DEFAULT_DIFFUSERS_IMAGE", "registry.harbor.lan/library/diffusers-api:cuda"),
)

ENV_KEYS = {
    "numInferenceSteps": "DEFAULT_NUM_INFERENCE_STEPS",
    "guidanceScale": "DEFAULT_GUIDANCE_SCALE",
    "scheduler": "DEFAULT_SCHEDULER",
    "negativePrompt": "DEFAULT_NEGATIVE_PROMPT",
    "useFp16": "USE_FP16",
    "vaePath": "VAE_PATH",
    "vaeRepo": "VAE_REPO",
    "singleFileConfig": "SINGLE_FILE_CONFIG",
    "singleFilePipeline": "SINGLE_FILE_PIPELINE",
    "singleFileStrict": "SINGLE_FILE_STRICT",
    "modelFamily": "MODEL_FAMILY",
    "compileMode": "COMPILE_MODE",
    "compileFullgraph": "COMPILE_FULLGRAPH",
    "compileDynamic": "COMPILE_DYNAMIC",
    "compileRepeatedBlocks": "COMPILE_REPEATED_BLOCKS",
    "loraPath": "LORA_PATH",
    "loraRepo": "LORA_REPO",
    "loraWeightName": "LORA_WEIGHT_NAME",
    "loraAdapterName": "LORA_ADAPTER_NAME",
    "loraScale": "LORA_SCALE",
    "quantization": "QUANTIZATION",
    "computeDtype": "BNB_COMPUTE_DTYPE",
    "pipelineMode": "PIPELINE_MODE",
    "strength": "DEFAULT_STRENGTH",
    "imageGuidanceScale": "DEFAULT_IMAGE_GUIDANCE_SCALE",
    "useRocmAiterRopeBackend": "USE_ROCM_AITER_ROPE_BACKEND",
    "controlnetPath": "CONTROLNET_PATH",
    "controlnetRepo": "CONTROLNET_REPO",
    "controlnetScale": "CONTROLNET_SCALE",
    "skipWarmup": "SKIP_WARMUP",
}
"""spec.config key -> environment variable, in the operator's order."""


def warmup_env(config: Config, vendor: str | None, arch: str) -> dict[str, str]:
    """warmupResolutions, else warmupWidth/Height, else a default per AMD architecture."""
    if resolutions := config.env_text("warmupResolutions"):
        return {"WARMUP_RESOLUTIONS": resolutions}
    if width := config.env_text("warmupWidth"):
        env = {"WARMUP_WIDTH": width}
        if height := config.env_text("warmupHeight"):
            env["WARMUP_HEIGHT"] = height
        return env
    if vendor == "amd" and arch.startswith("gfx110"):
        return {"WARMUP_RESOLUTIONS": "512x512,1024x1024"}
    if vendor == "amd" and arch.startswith("gfx906"):
        return {"WARMUP_RESOLUTIONS": "512x512"}
    return {}


def amd_env(config: Config, arch: str) -> dict[str, str]:
    """ROCm stability settings for diffusion pipelines (hipBLASLt off, MIOpen fast find)."""
    env = rocm_env(arch)
    if arch.startswith("gfx110"):
        env["TORCH_BLAS_PREFER_HIPBLASLT"] = "0"
    offload = config.env_text("cpuOffload") in ("true", "1")
    env["USE_CPU_OFFLOAD"] = "1" if offload else "0"
    if arch.startswith("gfx110"):
        env["MIOPEN_FIND_MODE"] = config.env_text("miopenFindMode", "2")
        env["PYTORCH_HIP_ALLOC_CONF"] = (
            "garbage_collection_threshold:0.9,max_split_size_mb:512,expandable_segments:True"
        )
    if arch.startswith("gfx906"):
        env["PYTORCH_HIP_ALLOC_CONF"] = "garbage_collection_threshold:0.8,max_split_size_mb:256"
        env["ENABLE_ATTENTION_SLICING"] = "1"
    return env


class DiffusersBackend(Backend):
    """Diffusers: readiness a TCP check (0/5/3, 3 failures) after a GET /health startup
    probe; startup timeout 900 s; idle timeout 10 m."""

    facts = backend_facts("diffusers")
    model_passing: ClassVar[ModelPassing] = ModelPassing.ENV
    default_idle_timeout_s: ClassVar[float] = 600.0
    startup_timeout_s: ClassVar[float] = 900.0

    def render(self, request: RenderRequest) -> EngineSpec:
        """The image's own entrypoint, configured through MODEL_ID, PORT and the config."""
        require_vendor(self.name, self.vendors, request)
        config = Config(request.model.spec.config)
        host, port = bind(request, self.port)
        model = model_arg(request)
        env = {"MODEL_ID": model, "MODEL": model, "PORT": str(port)}
        for key, name in ENV_KEYS.items():
            if value := config.env_text(key):
                env[name] = value
        arch = request.arch or ""
        env |= warmup_env(config, request.vendor, arch)
        if request.vendor == "amd":
            env |= amd_env(config, arch)
        return EngineSpec(
            backend=self.name,
            image=resolve_image(IMAGES, request),
            command=(),
            args=(),
            env=env,
            host=host,
            port=port,
            served_name=served_name(request.model),
            readiness=tcp_probe(port, 0, 5, 3, failures=3),
            startup=http_startup_probe("/health", port, self.startup_timeout_s),
            startup_timeout_s=self.startup_timeout_s,
            model_mount=request.model_location,
        )
