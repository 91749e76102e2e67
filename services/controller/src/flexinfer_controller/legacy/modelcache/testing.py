"""Sample ModelCaches covering every storage strategy, for the render, RBAC and docs tests."""

from __future__ import annotations

from typing import Any

from flexinfer_common.api import ModelCache
from flexinfer_controller.legacy.modelcache.plan import JobOptions

UID = "2f0c4a1e-6b7d-4c3a-8e9f-1a2b3c4d5e6f"
OPTIONS = JobOptions("flexinfer/registry", "flexinfer-registry.flexinfer.svc:8001")


def cache_manifest(name: str, namespace: str = "ml", **spec: Any) -> dict[str, Any]:
    """A v1alpha1 ModelCache manifest, as kubectl would apply it."""
    return {
        "apiVersion": "ai.flexinfer/v1alpha1",
        "kind": "ModelCache",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


CACHE_SAMPLES: tuple[dict[str, Any], ...] = (
    cache_manifest("qwen-coder-7b", source="HF://Qwen/Qwen2.5-Coder-7B-Instruct",
                   storageStrategy="SharedPVC", clusterStorageClassName="longhorn",
                   storageSize="40Gi", secretRef="hf-token"),
    cache_manifest("llama-shared", source="huggingface://meta-llama/Llama-3.1-8B",
                   existingClaimName="team-models", modelPath="llama/8b"),
    cache_manifest("phi-local", source="hf://microsoft/phi-2", storageStrategy="NodeLocal",
                   nodeSelector={"flexinfer.ai/gpu.vendor": "nvidia"}),
    cache_manifest("scratch", source="hf://org/m", storageStrategy="Ephemeral"),
    cache_manifest("from-s3", source="s3://bucket/models/m", storageStrategy="Auto"),
)  # fmt: skip
"""Every strategy, an existing claim, a Secret, a custom nodeSelector, a non-HF source."""


def sample_cache(manifest: dict[str, Any], generation: int = 1) -> ModelCache:
    """The ModelCache of ``manifest``, with a uid and generation as the apiserver gives them."""
    cache = ModelCache.model_validate(manifest)
    meta = cache.metadata.model_copy(update={"uid": UID, "generation": generation})
    return cache.model_copy(update={"metadata": meta})
