"""Sample Models covering every backend and render variant, for tests and the docs.

Each sample names a Model manifest and the GPU the controller detected for it; together
they cover GPU and CPU, PVC / node directory / no cache, prefetch, quantization, the
flash loader (emptyDir and node tmpfs), a backend ConfigMap and a PodDisruptionBudget.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from flexinfer_common.api import Model
from flexinfer_controller.runtime.kubernetes.options import GPUPlacement, RenderOptions

UID = "7c1e9d62-3b7a-4f0e-9a51-0d2f6b1c8e44"


@dataclass(frozen=True)
class Sample:
    """A Model and the render options the controller would use for it."""

    id: str
    manifest: dict[str, Any]
    gpu: GPUPlacement = field(default_factory=GPUPlacement)
    replicas: int = 1

    def model(self) -> Model:
        """The Model, with a uid as the apiserver gives it."""
        model = Model.model_validate(self.manifest)
        return model.model_copy(update={"metadata": model.metadata.model_copy(update={"uid": UID})})

    def options(self) -> RenderOptions:
        """Options with this sample's detected GPU and replica count."""
        return RenderOptions(replicas=self.replicas, gpu=self.gpu)


def manifest(name: str, spec: dict[str, Any], namespace: str = "ml") -> dict[str, Any]:
    """A v1alpha2 Model manifest."""
    return {
        "apiVersion": "ai.flexinfer/v1alpha2",
        "kind": "Model",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


SAMPLES = (
    Sample("reference-cpu-file", manifest("tiny", {
        "backend": "reference", "source": "file:///var/lib/flexinfer/models/tiny",
        "gpu": {"vendor": "cpu"}, "serviceLabels": ["textgen"],
    }, namespace="default")),
    Sample("vllm-nvidia-pvc-prefetch", manifest("qwen-7b", {
        "backend": "vllm", "source": "hf://Qwen/Qwen2.5-7B-Instruct",
        "gpu": {"vendor": "nvidia", "count": 2, "vramEstimateMB": 30000},
        "serverless": {"minReplicas": 2, "maxReplicas": 3},
        "cache": {"strategy": "SharedPVC", "size": "40Gi", "storageClass": "fast"},
        "config": {"dtype": "bfloat16", "maxModelLen": 8192, "gpuMemoryUtilization": "0.9"},
        "resources": {"requests": {"cpu": "0.5", "memory": "1024Mi"}, "limits": {"memory": "32Gi"}},
        "nodeSelector": {"topology.kubernetes.io/zone": "a"},
        "tolerations": [{"key": "spot", "operator": "Exists", "effect": "NoSchedule"}],
    }), GPUPlacement("nvidia", "sm_89"), replicas=2),
    Sample("vllm-shared-memory-flash", manifest("llama-3.1-8b", {
        "backend": "vllm", "source": "HF://meta-llama/Llama-3.1-8B-Instruct",
        "gpu": {"vendor": "nvidia", "shared": "rtx4090-pool", "vramEstimateMB": 18000},
        "cache": {"strategy": "Memory", "size": "20Gi",
                  "flashLoader": {"enabled": True, "concurrency": 8}},
    }), GPUPlacement("nvidia", "sm_89")),
    Sample("vllm-quantize-gpu", manifest("mistral-awq", {
        "backend": "vllm", "source": "s3://models/mistral-7b",
        "gpu": {"vendor": "auto"},
        "quantize": {"format": "AWQ", "useGPU": True, "bits": 4,
                     "image": "registry.harbor.lan/ml/autoawq-quantizer:0.2"},
    }), GPUPlacement("nvidia", "sm_90")),
    Sample("ollama-amd-pull", manifest("llama3", {
        "backend": "ollama", "source": "ollama://llama3.2:3b", "gpu": {"vendor": "amd"},
    }), GPUPlacement("amd", "gfx1100")),
    Sample("llamacpp-cpu-local", manifest("qwen-gguf", {
        "backend": "llamacpp", "source": "hf://Qwen/Qwen2.5-7B-Instruct-GGUF",
        "gpu": {"vendor": "cpu"}, "cache": {"strategy": "Local"},
        "config": {"ggufFile": "qwen2.5-7b-instruct-q4_k_m.gguf", "contextSize": 4096},
    })),
    Sample("mlc-llm-nvidia-existing-pvc", manifest("phi-mlc", {
        "backend": "mlc-llm", "source": "pvc://shared-models/mlc/phi-3",
        "gpu": {"vendor": "nvidia"}, "config": {"maxNumSequence": 4},
    }), GPUPlacement("nvidia")),
    Sample("diffusers-nvidia-quantize-cpu", manifest("sdxl", {
        "backend": "diffusers", "source": "gs://weights/sdxl-turbo", "gpu": {"vendor": "nvidia"},
        "quantize": {"format": "FP8"}, "config": {"numInferenceSteps": 4},
    }), GPUPlacement("nvidia")),
    Sample("comfyui-nvidia-configmap", manifest("comfy", {
        "backend": "comfyui", "source": "hf://stabilityai/sdxl-turbo", "gpu": {"vendor": "nvidia"},
    }), GPUPlacement("nvidia")),
    Sample("vllm-omni-amd-ngc-no-cache", manifest("omni", {
        "backend": "vllm-omni", "source": "ngc://nvidia/flux-dev", "gpu": {"vendor": "amd"},
        "cache": {"strategy": "None"}, "config": {"dtype": "bfloat16"},
    }), GPUPlacement("amd", "gfx1100")),
)  # fmt: skip
