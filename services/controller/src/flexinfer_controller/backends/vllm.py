"""vLLM (``vllm/vllm-openai``): the OpenAI-compatible server, model by ``--model``.

Args follow vLLM's documented CLI (``vllm serve --help``) and the operator's config keys
(reference §5); keys not listed here are ignored. The served name is always passed, so
the engine answers to the name the proxy forwards.
"""

from __future__ import annotations

import re
from typing import ClassVar

from flexinfer_common.api import Model
from flexinfer_common.backends import backend_facts
from flexinfer_controller.backends.base import (
    AdapterEndpoints,
    Backend,
    EngineSpec,
    RenderRequest,
    SleepEndpoints,
)
from flexinfer_controller.backends.render import (
    Config,
    ImageRule,
    bind,
    flag_args,
    http_probe,
    model_arg,
    require_vendor,
    resolve_image,
    rocm_env,
    served_name,
)

IMAGES = (
    ImageRule(
        "DEFAULT_VLLM_IMAGE_GFX1100",
        "registry.harbor.lan/flexinfer/vllm:rocm-gfx1100-fa",
        vendor="amd",
        arch_prefix="gfx110",
    ),
    ImageRule(
        "DEFAULT_VLLM_IMAGE_GFX906",
        "registry.harbor.lan/flexinfer/vllm:rocm-gfx906",
        vendor="amd",
        arch_prefix="gfx906",
    ),
    ImageRule("DEFAULT_VLLM_IMAGE_AMD", "rocm/vllm:latest", vendor="amd"),
    ImageRule("DEFAULT_VLLM_IMAGE", "vllm/vllm-openai:latest"),
)

_FLAGS_BEFORE_ATTENTION = (
    ("dtype", "--dtype", "str"),
    ("maxModelLen", "--max-model-len", "int"),
    ("gpuMemoryUtilization", "--gpu-memory-utilization", "str"),
)
_FLAGS = (
    ("trustRemoteCode", "--trust-remote-code", "bool"),
    ("maxNumSeqs", "--max-num-seqs", "int"),
    ("maxNumBatchedTokens", "--max-num-batched-tokens", "int"),
    ("enforceEager", "--enforce-eager", "bool"),
    ("cpuOffloadGb", "--cpu-offload-gb", "str"),
    ("offloadBackend", "--offload-backend", "str"),
    ("numGpuBlocksOverride", "--num-gpu-blocks-override", "int"),
    ("quantization", "--quantization", "str"),
    ("tokenizer", "--tokenizer", "str"),
)
_FLAGS_AFTER_PARSERS = (
    ("reasoningParser", "--reasoning-parser", "str"),
    ("disableLogStats", "--disable-log-stats", "bool"),
)
_AITER_OFF = tuple(
    f"VLLM_ROCM_USE_AITER{suffix}"
    for suffix in (
        "", "_PAGED_ATTN", "_LINEAR", "_MOE", "_RMSNORM", "_MLA", "_MHA", "_FP4_ASM_GEMM",
        "_TRITON_ROPE", "_FP8BMM", "_FP4BMM", "_UNIFIED_ATTENTION",
        "_FUSION_SHARED_EXPERTS", "_TRITON_GEMM",
    )
)  # fmt: skip


def is_turboquant(config: Config) -> bool:
    """config.kvCacheCodec=turboquant: the experimental KV-cache codec plugin."""
    return config.string("kvCacheCodec").lower() == "turboquant"


def tool_args(config: Config) -> list[str]:
    """enableToolCalling -> ``--enable-auto-tool-choice --tool-call-parser P`` (hermes)."""
    if not config.boolean("enableToolCalling"):
        return []
    return [
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        config.string("toolCallParser", "hermes"),
    ]


def common_env(config: Config) -> dict[str, str]:
    """disabledKernels and pytorchCudaAllocConf, shared with vllm-omni."""
    env = {}
    if kernels := config.string("disabledKernels", flag_value=False):
        env["VLLM_DISABLED_KERNELS"] = kernels
    if alloc := config.string("pytorchCudaAllocConf", flag_value=False):
        env["PYTORCH_CUDA_ALLOC_CONF"] = alloc
    return env


_VLLM_ROCM_ARCHS = frozenset({"gfx90a", "gfx942", "gfx950"})
RUNTIME_LORA_ENV = "VLLM_ALLOW_RUNTIME_LORA_UPDATING"
"""Without it vLLM serves no /v1/load_lora_adapter or /v1/unload_lora_adapter route."""
LORA_API = AdapterEndpoints("/v1/load_lora_adapter", "/v1/unload_lora_adapter")


def lora_enabled(request: RenderRequest) -> bool:
    """LoRA is on for bound adapters, ``enableLora`` or ``maxLoras`` (``--enable-lora``)."""
    config = Config(request.model.spec.config)
    return request.lora_adapters > 0 or config.boolean("enableLora") or config.has("maxLoras")


def lora_hint(model: Model) -> str | None:
    """Why adapters cannot be loaded into ``model``'s vLLM (None: they can)."""
    if lora_enabled(RenderRequest(model=model, model_location=None)):
        return None
    return (
        f"the vLLM engine of Model {model.key} runs without --enable-lora: set "
        "spec.config.enableLora: true (and maxLoras, the adapters one batch may mix) so "
        "that its engines are restarted with LoRA"
    )


class VllmBackend(Backend):
    """vLLM: image entrypoint with ``--host --port --model`` and flags from spec.config."""

    facts = backend_facts("vllm")
    sleep: ClassVar[SleepEndpoints | None] = SleepEndpoints("/sleep", "/wake_up")
    lora: ClassVar[AdapterEndpoints | None] = LORA_API
    metrics_path: ClassVar[str | None] = "/metrics"
    startup_timeout_s: ClassVar[float] = 300.0

    def supports_arch(self, vendor: str, arch: str) -> bool:
        """vLLM's documented GPUs: CUDA compute capability 7.0 or newer; on ROCm MI200
        (gfx90a), MI300 (gfx942), MI350 (gfx950) and Radeon RX 7900 / 9000 (gfx110x,
        gfx120x)."""
        if vendor == "nvidia":
            match = re.fullmatch(r"sm_(\d+)", arch)
            return match is None or int(match.group(1)) >= 70
        if vendor == "amd":
            return arch in _VLLM_ROCM_ARCHS or arch.startswith(("gfx110", "gfx120"))
        return True

    def lora_disabled(self, model: Model) -> str | None:
        """Adapters need ``--enable-lora``, which only a restart with it turns on."""
        return lora_hint(model)

    def render(self, request: RenderRequest) -> EngineSpec:
        """The vLLM container: readiness GET /health (10/10/5), startup timeout 300 s."""
        require_vendor(self.name, self.vendors, request)
        host, port = bind(request, self.port)
        return EngineSpec(
            backend=self.name,
            image=resolve_image(IMAGES, request),
            command=(),
            args=tuple(self.args(request, host, port)),
            env=self.env(request),
            host=host,
            port=port,
            served_name=self.served(request),
            readiness=http_probe("/health", port, 10, 10, 5),
            startup=None,
            startup_timeout_s=self.startup_timeout_s,
            model_mount=request.model_location,
        )

    @staticmethod
    def served(request: RenderRequest) -> str:
        """config.servedModelName, else the Model's served name."""
        return Config(request.model.spec.config).string("servedModelName") or served_name(
            request.model
        )

    def args(self, request: RenderRequest, host: str, port: int) -> list[str]:
        """``--host H --port P --model M`` then the config flags, in the operator's order."""
        config = Config(request.model.spec.config)
        args = ["--host", host, "--port", str(port), "--model", model_arg(request)]
        args += flag_args(config, _FLAGS_BEFORE_ATTENTION)
        attention = config.string("attentionBackend") or ("CUSTOM" if is_turboquant(config) else "")
        if attention:
            args += ["--attention-backend", attention]
        args += flag_args(config, _FLAGS)
        args += ["--served-model-name", self.served(request)]
        args += flag_args(config, (("kvCacheDtype", "--kv-cache-dtype", "str"),))
        if config.has("enablePrefixCaching") and not config.boolean("enablePrefixCaching", True):
            args.append("--no-enable-prefix-caching")
        if config.has("disableHybridKVCacheManager"):
            hybrid = config.boolean("disableHybridKVCacheManager")
            args.append(f"--{'' if hybrid else 'no-'}disable-hybrid-kv-cache-manager")
        args += tool_args(config)
        args += flag_args(config, _FLAGS_AFTER_PARSERS)
        for key, flag in (
            ("speculativeConfig", "--speculative-config"),
            ("limitMmPerPrompt", "--limit-mm-per-prompt"),
            ("mmProcessorKwargs", "--mm-processor-kwargs"),
        ):
            if value := config.json_text(key):
                args += [flag, value]
        return args + self._kv_and_lora_args(request, config)

    @staticmethod
    def _kv_and_lora_args(request: RenderRequest, config: Config) -> list[str]:
        args = []
        kv = request.model.spec.kv_cache
        if kv is not None and kv.max_block_size is not None:
            args += ["--block-size", str(kv.max_block_size)]
        # spec.kvCache.swapSpace is not passed: vLLM V1 removed --swap-space.
        if lora_enabled(request):
            count = config.integer("maxLoras") or max(request.lora_adapters, 1)
            args += ["--enable-lora", "--max-loras", str(count)]
            args += flag_args(config, (("maxLoraRank", "--max-lora-rank", "int"),))
        return args

    def env(self, request: RenderRequest) -> dict[str, str]:
        """CUDA_DEVICE_ORDER; ROCm and AITER settings on AMD; kernel and allocator knobs."""
        config = Config(request.model.spec.config)
        env = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
        if request.vendor == "amd":
            env |= rocm_env(request.arch)
            if config.boolean("enableFlashAttention"):
                env["VLLM_USE_TRITON_FLASH_ATTN"] = "1"
            env |= _aiter_env(config, request.arch or "")
            if config.has("rocmCustomPagedAttn"):
                paged = config.boolean("rocmCustomPagedAttn")
                env["VLLM_ROCM_USE_AITER_PAGED_ATTN"] = "1" if paged else "0"
        env |= common_env(config)
        if lora_enabled(request):
            env[RUNTIME_LORA_ENV] = "True"  # the controller loads LoRAAdapters at runtime
        if is_turboquant(config):
            env["FLEXINFER_EXPERIMENTAL_KV_CACHE_CODEC"] = "turboquant"
            env["FLEXINFER_EXPERIMENTAL_KV_CACHE_CODEC_STATUS"] = "plugin"
        return env


def _aiter_env(config: Config, arch: str) -> dict[str, str]:
    """rocmUseAiter (or its inverse disableAiter) wins; else enableAiter on gfx110x/gfx942."""
    if config.has("rocmUseAiter"):
        use = config.boolean("rocmUseAiter")
    elif config.has("disableAiter"):
        use = not config.boolean("disableAiter")
    else:
        supported = arch.startswith(("gfx110", "gfx942"))
        return {"VLLM_ROCM_USE_AITER": "1"} if config.boolean("enableAiter") and supported else {}
    return {"VLLM_ROCM_USE_AITER": "1"} if use else dict.fromkeys(_AITER_OFF, "0")
