"""Backend settings of a v1alpha1 ModelDeployment: spec.vllm, spec.mlcllm and the free-form rest.

Field names, enums and bounds follow shared/reference/flexinfer-api.md §3.1. Only part of the
operator's VLLMSpec was read, so it keeps fields it does not declare (as the CRD does); the
llamacpp, comfyui and vllmOmni sub-specs were not read at all and are stored as written.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field

from flexinfer_common.api.meta import ApiModel

FreeForm = dict[str, Any]
"""A sub-spec whose fields we do not know: kept as written (preserve-unknown-fields)."""

AttentionBackend = Literal[
    "FLASH_ATTN",
    "XFORMERS",
    "ROCM_FLASH",
    "FLASHINFER",
    "TORCH_SDPA",
    "flash_attn",
    "xformers",
    "rocm_flash",
    "flashinfer",
    "torch_sdpa",
]


class VLLMSpec(ApiModel):
    """spec.vllm: vLLM engine flags."""

    model_config = ConfigDict(extra="allow")

    tensor_parallel_size: int | None = Field(default=None, ge=1, le=8)
    dtype: Literal["auto", "float16", "bfloat16", "float32"] | None = None
    quantization: Literal["awq", "squeezellm", "gptq", "fp8", "None", ""] | None = None
    max_model_len: int | None = Field(default=None, ge=256, le=131072)
    gpu_memory_utilization: str | None = None
    enforce_eager: bool | None = None
    max_num_seqs: int | None = Field(default=None, ge=1)
    swap_space: int | None = Field(default=None, ge=0)
    trust_remote_code: bool | None = None
    hip_visible_devices: str | None = None
    enable_prefix_caching: bool | None = None
    kv_cache_dtype: Literal["auto", "fp8", "fp8_e5m2", "fp8_e4m3", "fp8_inc", "int8"] | None = None
    calculate_kv_scales: bool | None = None
    attention_backend: AttentionBackend | None = None


class MLCOverrides(ApiModel):
    """spec.mlcllm.overrides: values passed to ``mlc_llm serve --overrides``."""

    prefill_chunk_size: int | None = Field(default=None, ge=64, le=8192)
    max_total_seq_length: int | None = Field(default=None, ge=256, le=131072)
    max_num_sequence: int | None = Field(default=None, ge=1, le=256)
    gpu_memory_utilization: str | None = None
    context_window_size: int | None = Field(default=None, ge=256, le=131072)
    raw: str | None = Field(default=None, description="appended to --overrides as written")


class MLCCompileOptions(ApiModel):
    """spec.mlcllm.compileOptions: kernels the model library is compiled with."""

    use_cutlass: bool | None = None
    use_flash_infer: bool | None = None
    use_cublas_gemm: bool | None = None
    use_cuda_graph: bool | None = None


class MLCLLMSpec(ApiModel):
    """spec.mlcllm: MLC LLM engine settings."""

    mode: Literal["local", "server", "interactive"] | None = None
    model_lib_path: str | None = None
    gpu_memory_bytes: int | None = None
    jit_policy: Literal["ON", "OFF", "REDO", "READONLY"] | None = None
    overrides: MLCOverrides | None = None
    compile_options: MLCCompileOptions | None = None
