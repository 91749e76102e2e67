"""The API types of every kind: defaults, enums and bounds as the operator's reference has them."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from flexinfer_common import api
from flexinfer_common.api import (
    GPUGroup,
    Model,
    ModelCache,
    ModelCatalog,
    ModelDeployment,
)
from flexinfer_common.api.status import ModelStatus


def _obj(kind: type[BaseModel], spec: dict[str, Any]) -> Any:
    return kind.model_validate({"metadata": {"name": "x"}, "spec": spec})


def test_finalizers() -> None:
    assert api.MODEL_FINALIZER == "flexinfer.ai/model-cleanup"
    assert api.LORA_FINALIZER == "flexinfer.ai/lora-cleanup"
    assert api.DEPLOYMENT_FINALIZER == "flexinfer.ai/cleanup"


def test_versions() -> None:
    assert (
        _obj(ModelCatalog, {"registries": [{"type": "Ollama"}]}).api_version
        == "ai.flexinfer/v1alpha2"
    )
    legacy: list[tuple[type[BaseModel], dict[str, Any]]] = [
        (ModelDeployment, {"backend": "vllm", "model": "a/b"}),
        (ModelCache, {"source": "HF://a/b"}),
        (GPUGroup, {"models": [{"name": "a"}]}),
    ]
    for kind, spec in legacy:
        assert _obj(kind, spec).api_version == "ai.flexinfer/v1alpha1"
    with pytest.raises(ValidationError):
        ModelDeployment.model_validate(
            {
                "apiVersion": "ai.flexinfer/v1alpha2",
                "metadata": {"name": "x"},
                "spec": {"backend": "b", "model": "m"},
            }
        )


def test_model_deployment_defaults() -> None:
    spec = _obj(ModelDeployment, {"backend": "ollama", "model": "llama3:8b"}).spec
    assert (spec.replicas, spec.min_replicas, spec.priority) == (1, 0, 100)
    assert (spec.idle_timeout_seconds, spec.cold_start_timeout_seconds) == (300, 60)
    bench = _obj(ModelDeployment, {"backend": "b", "model": "m", "benchmark": {}}).spec.benchmark
    assert (bench.warmup_iterations, bench.batch_size, bench.iterations) == (2, 128, 5)


@pytest.mark.parametrize(
    "bad",
    [
        {"coldStartTimeoutSeconds": 5},
        {"coldStartTimeoutSeconds": 1801},
        {"replicas": -1},
        {"priority": 1001},
        {"serviceLabels": [str(i) for i in range(11)]},
        {"vllm": {"tensorParallelSize": 9}},
        {"vllm": {"dtype": "int4"}},
        {"vllm": {"kvCacheDtype": "fp16"}},
        {"mlcllm": {"mode": "batch"}},
        {"mlcllm": {"overrides": {"prefillChunkSize": 32}}},
        {"benchmark": {"batchSize": 0}},
        {"model": "a\nb"},
        {"image": "vllm:latest"},
    ],
)
def test_model_deployment_rejects(bad: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        _obj(ModelDeployment, {"backend": "vllm", "model": "a/b", **bad})


def test_vllm_keeps_fields_it_does_not_declare() -> None:
    spec = _obj(
        ModelDeployment, {"backend": "vllm", "model": "a/b", "vllm": {"speculativeConfig": "x"}}
    ).spec
    assert spec.vllm.model_dump(by_alias=True, exclude_none=True) == {"speculativeConfig": "x"}


def test_model_cache_defaults_and_status() -> None:
    cache = _obj(ModelCache, {"source": "oras://r/m@sha256:abc"})
    assert (cache.spec.storage_strategy, cache.spec.storage_size) == ("Auto", "50Gi")
    assert cache.status.phase == "Pending"
    # No enum marker in the operator: an unknown strategy is stored, not refused.
    assert (
        _obj(ModelCache, {"source": "s", "storageStrategy": "Tiered"}).spec.storage_strategy
        == "Tiered"
    )
    with pytest.raises(ValidationError):
        _obj(ModelCache, {"source": "s", "quantization": {"format": "INT3"}})


def test_gpu_group_defaults_and_bounds() -> None:
    group = _obj(GPUGroup, {"models": [{"name": "a"}], "scalingPolicy": {}, "antiThrashing": {}})
    assert group.spec.models[0].priority == 100
    policy, anti = group.spec.scaling_policy, group.spec.anti_thrashing
    assert (policy.strategy, policy.preemption_policy, policy.drain_timeout_seconds) == (
        "Exclusive",
        "Graceful",
        60,
    )
    assert (
        anti.enabled,
        anti.minimum_run_duration_seconds,
        anti.cooldown_after_preemption_seconds,
    ) == (True, 30, 60)
    assert (anti.request_queue_threshold, anti.hysteresis_window_seconds) == (3, 10)
    assert group.spec.auto_cache_models is False
    bad_specs: list[dict[str, Any]] = [
        {"models": []},
        {"models": [{"name": "a", "priority": -1}]},
        {"models": [{"name": "a", "maxReplicas": 0}]},
        {"models": [{"name": "a"}], "scalingPolicy": {"drainTimeoutSeconds": 4}},
        {"models": [{"name": "a"}], "antiThrashing": {"requestQueueThreshold": 0}},
        {"models": [{"name": "a"}], "scalingPolicy": {"strategy": "Shared"}},
    ]
    for bad in bad_specs:
        with pytest.raises(ValidationError):
            _obj(GPUGroup, bad)


def test_model_catalog() -> None:
    catalog = _obj(ModelCatalog, {"registries": [{"type": "HuggingFace", "secretRef": "hf"}]})
    assert catalog.spec.sync_interval == timedelta(hours=1)
    bad_specs: list[dict[str, Any]] = [
        {"registries": []},
        {"registries": [{"type": "S3"}]},
        {"registries": [{"type": "OCI"}]},
    ]
    for bad in bad_specs:
        with pytest.raises(ValidationError):
            _obj(ModelCatalog, bad)
    status = ModelCatalog.model_validate(
        {
            "metadata": {"name": "c"},
            "spec": {"registries": [{"type": "OCI", "url": "r.example/m"}]},
            "status": {
                "entries": [{"name": "m", "registry": "r", "reference": "r/m:1", "size": 5}],
                "totalModels": 1,
            },
        }
    ).status
    assert status.entries[0].size == 5


def test_model_node_selector_must_agree_with_a_pinned_vendor() -> None:
    base = {"backend": "vllm", "source": "hf://a/b"}
    label = {"nodeSelector": {"node.flexstack.io/gpu-vendor": "amd"}}
    assert _obj(Model, {**base, **label, "gpu": {"vendor": "auto"}})
    assert _obj(Model, {**base, **label, "gpu": {"vendor": "amd"}})
    assert _obj(Model, {**base, **label})
    with pytest.raises(ValidationError, match=r"contradicts gpu\.vendor"):
        _obj(Model, {**base, **label, "gpu": {"vendor": "nvidia"}})


def test_model_status_carries_kv_cache_and_quantization() -> None:
    status = ModelStatus.model_validate(
        {
            "kvCache": {
                "utilization": "0.91",
                "pressure": True,
                "reconfiguredMaxNumSeqs": 64,
                "evicted": False,
            },
            "cache": {"ready": True, "quantization": {"format": "AWQ", "phase": "Done"}},
        }
    )
    assert status.kv_cache is not None
    assert status.kv_cache.reconfigured_max_num_seqs == 64
    assert status.cache is not None
    assert status.cache.quantization == {
        "format": "AWQ",
        "phase": "Done",
    }
