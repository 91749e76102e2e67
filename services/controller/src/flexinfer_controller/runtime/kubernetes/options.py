"""What the Kubernetes renderers are told besides the Model: the controller's choices."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from flexinfer_controller.backends.base import SecretKeyRef
from flexinfer_controller.flashload.settings import FlashLoadSettings
from flexinfer_controller.kube_settings import CONTROLLER_IMAGE, REGISTRY_ADDRESS, REGISTRY_IMAGE

QUANTIZER_COMMAND = ["python", "-m", "flexinfer_controller.quantize"]
"""The built-in quantizer (FP8, GGUF), run from ``controller_image`` when neither
spec.quantize.image nor ``FLEXINFER_QUANTIZER_<FMT>_IMAGE`` names another image."""
MODEL_MOUNT = "/models"
"""Where the model cache is mounted in every container."""


@dataclass(frozen=True)
class GPUPlacement:
    """The detected GPU a Model's pods go to (detectGPU's answer); None fields: unknown."""

    vendor: str | None = None
    """``nvidia``, ``amd``, ``intel`` or ``cpu``."""
    arch: str | None = None
    """``sm_89``, ``gfx1100``..."""


@dataclass(frozen=True)
class RenderOptions:
    """The controller's side of a render: replicas, readiness of the cache, images."""

    replicas: int = 0
    """The desired count (0 while the cache gate holds or the model is idle)."""
    gpu: GPUPlacement = field(default_factory=GPUPlacement)
    environ: Mapping[str, str] = field(default_factory=dict)
    """Image overrides (``DEFAULT_VLLM_IMAGE``, ``FLEXINFER_QUANTIZER_AWQ_IMAGE``...)."""
    controller_image: str = CONTROLLER_IMAGE
    """Has the flash loader and the built-in quantizer."""
    registry_image: str = REGISTRY_IMAGE
    registry_address: str = REGISTRY_ADDRESS
    registry_token_secret: SecretKeyRef | None = None
    """The Secret key engine pods read the registry's P2P token from; None: no token."""
    registry_fetch_token_secret: SecretKeyRef | None = None
    """The Secret key prefetch and LoRA fetch Jobs read the registry's fetch token from."""
    flash: FlashLoadSettings = field(default_factory=FlashLoadSettings)
    """Controller-wide flash loader defaults; spec.cache.flashLoader wins over them."""
    shm_size_limit: str = "8Gi"
    """The operator's DEFAULT_SHM_SIZE_LIMIT: the tmpfs size when nothing else says."""
    model_mount: str = MODEL_MOUNT
    lora_roots: tuple[str, ...] = (MODEL_MOUNT,)
    """Directories in the engine container that LoRA adapters may be loaded from: the
    model volume, and the operator's (the controller's ``adapter_roots``)."""
