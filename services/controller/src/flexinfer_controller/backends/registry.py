"""The default backend registry: one factory per backend module."""

from __future__ import annotations

from flexinfer_controller.backends.base import BackendFactory, BackendRegistry
from flexinfer_controller.backends.comfyui import ComfyUIBackend
from flexinfer_controller.backends.diffusers import DiffusersBackend
from flexinfer_controller.backends.llamacpp import LlamaCppBackend
from flexinfer_controller.backends.mlc_llm import MlcLlmBackend
from flexinfer_controller.backends.ollama import OllamaBackend
from flexinfer_controller.backends.reference import ReferenceBackend
from flexinfer_controller.backends.vllm import VllmBackend
from flexinfer_controller.backends.vllm_omni import VllmOmniBackend


def backend_factories() -> dict[str, BackendFactory]:
    """Canonical name -> factory, for every backend FlexInfer renders."""
    return {
        "reference": ReferenceBackend,
        "ollama": OllamaBackend,
        "vllm": VllmBackend,
        "mlc-llm": MlcLlmBackend,
        "llamacpp": LlamaCppBackend,
        "diffusers": DiffusersBackend,
        "comfyui": ComfyUIBackend,
        "vllm-omni": VllmOmniBackend,
    }


def default_backends() -> BackendRegistry:
    """Every backend, by name and alias."""
    return BackendRegistry(backend_factories())
