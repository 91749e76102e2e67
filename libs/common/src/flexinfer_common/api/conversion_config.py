"""v1alpha1 backend sub-specs (spec.vllm, spec.mlcllm, ...) <-> a v1alpha2 Model's spec.config.

One entry per backend in BACKEND_SETTINGS: which ModelDeployment field holds its settings and
how they flatten into config keys. vLLM's and llama.cpp's settings are already named like the
v1alpha2 config keys (shared/reference/flexinfer-api.md §5); MLC's ``overrides`` flatten to
the top level, as the v1alpha2 mlc-llm backend reads them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from flexinfer_common.api.deployment_backends import (
    MLCCompileOptions,
    MLCLLMSpec,
    MLCOverrides,
    VLLMSpec,
)

Config = dict[str, Any]

BACKEND_ALIASES = {
    "mlc": "mlc-llm",
    "mlc_llm": "mlc-llm",
    "llama.cpp": "llamacpp",
    "llama-cpp": "llamacpp",
    "llama_cpp": "llamacpp",
    "comfy": "comfyui",
    "comfy-ui": "comfyui",
    "comfy_ui": "comfyui",
    "vllm-diffusion": "vllm-omni",
    "vllm_omni": "vllm-omni",
}
"""Other spellings of a backend name, as the operator's backend registry resolves them."""


def canonical_backend(name: str) -> str:
    """The backend's registry name (``llama.cpp`` -> ``llamacpp``)."""
    lowered = name.lower()
    return BACKEND_ALIASES.get(lowered, lowered)


@dataclass(frozen=True, slots=True)
class BackendSettings:
    """Where one backend's v1alpha1 settings live and how they map to spec.config."""

    field: str
    """The ModelDeploymentSpec attribute (python name) holding them."""
    to_config: Callable[[Any], Config]
    from_config: Callable[[Config], Any]
    """The sub-spec from a config, or None when the config does not fit it."""


def _dump(value: BaseModel) -> Config:
    return value.model_dump(mode="json", by_alias=True, exclude_none=True)


def _vllm_from_config(config: Config) -> VLLMSpec | None:
    try:
        return VLLMSpec.model_validate(config)
    except ValidationError:
        return None


_MLC_TOP = frozenset(("mode", "modelLibPath", "gpuMemoryBytes", "jitPolicy", "compileOptions"))
_MLC_OVERRIDES = frozenset(f.alias or n for n, f in MLCOverrides.model_fields.items() if n != "raw")
_MLC_RAW = "overridesRaw"


def _mlc_to_config(spec: MLCLLMSpec) -> Config:
    config = _dump(spec)
    overrides = config.pop("overrides", {})
    if "raw" in overrides:
        config[_MLC_RAW] = overrides.pop("raw")
    return {**config, **overrides}


def _mlc_from_config(config: Config) -> MLCLLMSpec | None:
    top = {k: v for k, v in config.items() if k in _MLC_TOP}
    overrides = {k: v for k, v in config.items() if k in _MLC_OVERRIDES}
    if _MLC_RAW in config:
        overrides["raw"] = config[_MLC_RAW]
    try:
        if "compileOptions" in top:
            top["compileOptions"] = MLCCompileOptions.model_validate(top["compileOptions"])
        return MLCLLMSpec.model_validate({**top, "overrides": overrides or None})
    except ValidationError:
        return None


def _copy(value: Config) -> Config:
    return dict(value)


BACKEND_SETTINGS: dict[str, BackendSettings] = {
    "vllm": BackendSettings("vllm", _dump, _vllm_from_config),
    "mlc-llm": BackendSettings("mlcllm", _mlc_to_config, _mlc_from_config),
    "llamacpp": BackendSettings("llamacpp", _copy, _copy),
    "comfyui": BackendSettings("comfyui", _copy, _copy),
    "vllm-omni": BackendSettings("vllm_omni", _copy, _copy),
}
"""Canonical backend name -> its settings mapping; other backends have no v1alpha1 settings."""


def settings_for(backend: str) -> BackendSettings | None:
    """The settings mapping of ``backend`` (any spelling), or None."""
    return BACKEND_SETTINGS.get(canonical_backend(backend))
