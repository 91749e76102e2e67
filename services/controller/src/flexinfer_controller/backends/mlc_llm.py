"""MLC-LLM (``python -m mlc_llm serve``): pre-compiled models, model as a positional.

Follows MLC-LLM's documented ``serve`` CLI: ``serve MODEL --host --port [--mode]
[--model-lib] [--overrides k=v;...]``. The operator passes config ``mode`` (default
``server``) as the subcommand, which mlc_llm does not have; here it is ``--mode`` (one of
local, interactive, server) and the subcommand is always ``serve``. The port is passed
explicitly (8000 on Kubernetes). Unknown config keys are ignored.
"""

from __future__ import annotations

from typing import ClassVar

from flexinfer_common.backends import backend_facts
from flexinfer_common.errors import InvalidSpecError
from flexinfer_controller.backends.base import Backend, EngineSpec, ModelPassing, RenderRequest
from flexinfer_controller.backends.render import (
    Config,
    ImageRule,
    bind,
    http_probe,
    model_arg,
    require_vendor,
    resolve_image,
    rocm_env,
    served_name,
)

IMAGES = (
    ImageRule("DEFAULT_MLC_LLM_IMAGE_AMD", "ghcr.io/mlc-ai/mlc-llm:rocm", vendor="amd"),
    ImageRule(
        "DEFAULT_MLC_LLM_IMAGE_MAXWELL",
        "registry.harbor.lan/flexinfer/mlc-llm:cuda-maxwell-v7",
        vendor="nvidia",
        arch_prefix="sm_5",
    ),
    ImageRule("DEFAULT_MLC_LLM_IMAGE", "ghcr.io/mlc-ai/mlc-llm:cuda"),
)
COMMAND = ("python", "-m", "mlc_llm")
MODES = frozenset({"local", "interactive", "server"})
GPU_SIZE_BYTES = "24696061952"
"""MLC_GPU_SIZE_BYTES when the GPU's memory is not known (~23 GiB, the operator's)."""

_OVERRIDES = (
    ("maxNumSequence", "max_num_sequence", "int"),
    ("maxTotalSeqLength", "max_total_sequence_length", "int"),
    ("prefillChunkSize", "prefill_chunk_size", "int"),
    ("gpuMemoryUtilization", "gpu_memory_utilization", "str"),
    ("contextWindowSize", "context_window_size", "int"),
    ("slidingWindowSize", "sliding_window_size", "int"),
    ("attentionSinkSize", "attention_sink_size", "int"),
)


def overrides(config: Config) -> str:
    """``k=v;k=v`` from the config; a value with ``;`` or ``=`` would add overrides: refused."""
    parts = []
    for key, name, kind in _OVERRIDES:
        if kind == "int":
            if (number := config.integer(key)) > 0:
                parts.append(f"{name}={number}")
        elif text := config.string(key):
            if ";" in text or "=" in text:
                raise InvalidSpecError(f"spec.config.{key} must not contain ';' or '='", field=key)
            parts.append(f"{name}={text}")
    return ";".join(parts)


class MlcLlmBackend(Backend):
    """MLC-LLM: readiness GET /v1/models (10/10/5), startup timeout 90 s."""

    facts = backend_facts("mlc-llm")
    model_passing: ClassVar[ModelPassing] = ModelPassing.POSITIONAL
    startup_timeout_s: ClassVar[float] = 90.0

    def render(self, request: RenderRequest) -> EngineSpec:
        """``python -m mlc_llm serve MODEL --host H --port P`` plus mode, lib and overrides."""
        require_vendor(self.name, self.vendors, request)
        config = Config(request.model.spec.config)
        host, port = bind(request, self.port)
        args = ["serve", model_arg(request), "--host", host, "--port", str(port)]
        if mode := config.string("mode"):
            if mode not in MODES:
                raise InvalidSpecError(
                    f"spec.config.mode must be one of {', '.join(sorted(MODES))}", field="mode"
                )
            args += ["--mode", mode]
        if lib := config.string("modelLibPath"):
            args += ["--model-lib", lib]
        if joined := overrides(config):
            args += ["--overrides", joined]
        env = {"MLC_GPU_SIZE_BYTES": GPU_SIZE_BYTES}
        if jit := config.env_text("jitPolicy"):
            env["MLC_JIT_POLICY"] = jit
        if request.vendor == "amd":
            env |= rocm_env(request.arch)
        return EngineSpec(
            backend=self.name,
            image=resolve_image(IMAGES, request),
            command=COMMAND,
            args=tuple(args),
            env=env,
            host=host,
            port=port,
            served_name=served_name(request.model),
            readiness=http_probe("/v1/models", port, 10, 10, 5),
            startup=None,
            startup_timeout_s=self.startup_timeout_s,
            model_mount=request.model_location,
        )
