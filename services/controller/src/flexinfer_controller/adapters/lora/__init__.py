"""The engines' runtime LoRA API over HTTP (vLLM's load/unload routes and /v1/models)."""

from flexinfer_controller.adapters.lora.http import HttpAdapterEngine

__all__ = ["HttpAdapterEngine"]
