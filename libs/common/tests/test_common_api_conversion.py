"""ModelDeployment (v1alpha1) <-> Model (v1alpha2): the field mapping and lossless round trips."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flexinfer_common.api import (
    V1ALPHA1_ANNOTATION,
    V1ALPHA2_ANNOTATION,
    Model,
    ModelDeployment,
    to_model,
    to_model_deployment,
)
from flexinfer_common.api.conversion_fields import deployment_model, model_source
from flexinfer_common.api.model import GPU_VENDOR_NODE_LABEL, GPUVendor
from flexinfer_common.errors import InvalidSpecError
from flexinfer_testing.repo import repo_root

EXAMPLES = repo_root() / "k8s" / "examples"
PROPERTY = settings(
    max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)

BACKENDS = ["ollama", "vllm", "mlc-llm", "mlc", "llamacpp", "llama.cpp", "comfyui", "vllm-omni"]
BACKENDS += ["diffusers", "reference"]
NAMES = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,12}[a-z0-9])?", fullmatch=True)
MODELS = st.one_of(
    st.sampled_from(["llama3:8b", "qwen2.5:7b", "meta-llama/Llama-3.1-8B", "hf://org/x"]),
    st.sampled_from(["HF://Org/X", "ollama://llama3", "file:///models/m", "pvc://c/p", "hf://"]),
    st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=40),
)
QUANTITIES = st.one_of(st.integers(0, 16), st.sampled_from(["1", "2", "500m", "8Gi", "0"]))
RESOURCE_NAMES = ["cpu", "memory", "nvidia.com/gpu", "amd.com/gpu", "gpu.intel.com/i915"]
RESOURCE_MAP = st.dictionaries(st.sampled_from(RESOURCE_NAMES), QUANTITIES, max_size=3)
LABELS = st.lists(st.sampled_from(["textgen", "code", "fast", "vision"]), max_size=4)
SELECTOR = st.dictionaries(
    st.sampled_from([GPU_VENDOR_NODE_LABEL, "kubernetes.io/hostname"]),
    st.sampled_from(["nvidia", "amd", "cpu", "node-1"]),
    max_size=2,
)
LITELLM = st.fixed_dictionaries(
    {},
    optional={
        "enabled": st.booleans(),
        "servedModelName": NAMES,
        "aliases": st.lists(NAMES, max_size=3),
        "copilotAlias": NAMES,
    },
)
VLLM = st.fixed_dictionaries(
    {},
    optional={
        "dtype": st.sampled_from(["auto", "float16", "bfloat16"]),
        "maxModelLen": st.integers(256, 131072),
        "gpuMemoryUtilization": st.sampled_from(["0.9", "0.85"]),
        "enforceEager": st.booleans(),
        "quantization": st.sampled_from(["awq", "None", ""]),
        "speculativeConfig": st.just('{"method": "ngram"}'),
    },
)
MLC = st.fixed_dictionaries(
    {},
    optional={
        "mode": st.sampled_from(["local", "server"]),
        "jitPolicy": st.sampled_from(["ON", "REDO"]),
        "gpuMemoryBytes": st.integers(0, 2**40),
        "overrides": st.fixed_dictionaries(
            {}, optional={"maxNumSequence": st.integers(1, 256), "raw": st.just("a=1")}
        ),
        "compileOptions": st.fixed_dictionaries({}, optional={"useCudaGraph": st.booleans()}),
    },
)
FREE = st.dictionaries(st.sampled_from(["contextSize", "jinja", "mmproj"]), st.integers(0, 9))
TIMES = st.sampled_from(["2025-01-02T03:04:05Z", "2025-06-01T00:00:00Z"])


@st.composite
def deployment_specs(draw: st.DrawFn) -> dict[str, Any]:
    """A v1alpha1 spec: every field optional, bounded as the CRD bounds them."""
    optional: dict[str, st.SearchStrategy[Any]] = {
        "replicas": st.integers(0, 20),
        "minReplicas": st.integers(0, 20),
        "idleTimeoutSeconds": st.one_of(st.integers(0, 7200), st.just(2**31 - 1)),
        "coldStartTimeoutSeconds": st.integers(10, 1800),
        "resources": st.fixed_dictionaries(
            {}, optional={"limits": RESOURCE_MAP, "requests": RESOURCE_MAP}
        ),
        "benchmark": st.fixed_dictionaries({}, optional={"iterations": st.integers(1, 9)}),
        "modelCacheRef": NAMES,
        "litellm": LITELLM,
        "nodeSelector": SELECTOR,
        "vllm": VLLM,
        "mlcllm": MLC,
        "llamacpp": FREE,
        "comfyui": FREE,
        "vllmOmni": FREE,
        "gpuGroupRef": NAMES,
        "priority": st.integers(0, 1000),
        "vramEstimateMB": st.integers(-5, 10**6),
        "serviceLabels": LABELS,
    }
    required = {"backend": st.sampled_from(BACKENDS), "model": MODELS}
    return draw(st.fixed_dictionaries(required, optional=optional))


STATUSES = st.fixed_dictionaries(
    {},
    optional={
        "phase": st.sampled_from(["Pending", "Running", "Failed", "Terminating"]),
        "endpoints": st.fixed_dictionaries({}, optional={"internal": NAMES, "external": NAMES}),
        "lastAccessTime": TIMES,
        "tokensPerSecond": st.sampled_from(["12.5", "40"]),
        "metrics": st.fixed_dictionaries(
            {}, optional={"tokensPerSecond": st.just("9"), "errorRate": st.just("0.01")}
        ),
        "allocatedGPU": st.fixed_dictionaries(
            {},
            optional={"node": NAMES, "type": st.just("nvidia"), "memoryMB": st.integers(0, 10**5)},
        ),
    },
)


@st.composite
def deployments(draw: st.DrawFn) -> ModelDeployment:
    """A valid ModelDeployment object."""
    meta = {"name": draw(NAMES), "namespace": "ml", "annotations": {"team": "a"}}
    doc = {"metadata": meta, "spec": draw(deployment_specs()), "status": draw(STATUSES)}
    return ModelDeployment.model_validate(doc)


def _bare(model: Model) -> Model:
    """``model`` without the kept v1alpha1 fields: a Model as a user would write it."""
    annotations = {k: v for k, v in model.metadata.annotations.items() if k != V1ALPHA1_ANNOTATION}
    return model.model_copy(
        update={"metadata": model.metadata.model_copy(update={"annotations": annotations})}
    )


@PROPERTY
@given(deployments())
def test_deployment_to_model_and_back_is_the_original(deployment: ModelDeployment) -> None:
    model = to_model(deployment)
    assert isinstance(model, Model)
    assert model.metadata.name == deployment.metadata.name
    assert to_model_deployment(model) == deployment


@PROPERTY
@given(deployments())
def test_model_to_deployment_and_back_is_the_original(deployment: ModelDeployment) -> None:
    # Every Model that is the image of a ModelDeployment has a v1alpha1 form.
    model = _bare(to_model(deployment))
    assert to_model(to_model_deployment(model)) == model


MODEL_SPECS = st.fixed_dictionaries(
    {
        "backend": st.sampled_from(BACKENDS),
        "source": st.sampled_from(["hf://a/b", "ollama://x:1", "file:///m"]),
    },
    optional={
        "gpu": st.fixed_dictionaries(
            {"vendor": st.sampled_from(["auto", "nvidia", "amd"])},
            optional={
                "count": st.integers(1, 8),
                "priority": st.integers(0, 1000),
                "shared": NAMES,
                "swapCooldown": st.sampled_from(["5m", "90s"]),
            },
        ),
        "serverless": st.fixed_dictionaries(
            {},
            optional={
                "enabled": st.booleans(),
                "maxReplicas": st.integers(1, 10),
                "idleTimeout": st.sampled_from(["10m", "1.5s", "0"]),
                "coldStartTimeout": st.sampled_from(["5s", "2h", "300s"]),
                "scaleToZero": st.booleans(),
                "targetConcurrency": st.integers(1, 10000),
            },
        ),
        "config": st.dictionaries(
            st.sampled_from(["dtype", "maxModelLen", "jinja"]), st.integers(0, 9)
        ),
        "cache": st.fixed_dictionaries({"strategy": st.sampled_from(["Memory", "Local"])}),
        "tolerations": st.just([{"key": "dedicated", "operator": "Exists"}]),
        "kvCache": st.just({"pressurePolicy": "Evict"}),
        "endpoints": st.just(["http://10.0.0.1:8000"]),
        "resources": st.just({"limits": {"memory": "8Gi"}}),
    },
)


@PROPERTY
@given(MODEL_SPECS)
def test_any_model_survives_a_trip_through_v1alpha1(spec: dict[str, Any]) -> None:
    model = Model.model_validate({"metadata": {"name": "m"}, "spec": spec})
    deployment = to_model_deployment(model)
    assert isinstance(deployment, ModelDeployment)
    assert to_model(deployment) == model


@pytest.mark.parametrize(
    ("backend", "model", "source"),
    [
        ("vllm", "meta-llama/Llama-3.1-8B", "hf://meta-llama/Llama-3.1-8B"),
        ("ollama", "llama3:8b", "ollama://llama3:8b"),
        ("mlc-llm", "llama3:8b", "hf://llama3:8b"),
        ("ollama", "HF://org/model", "HF://org/model"),
        ("vllm", "file:///models/x", "file:///models/x"),
    ],
)
def test_source_rule(backend: str, model: str, source: str) -> None:
    assert model_source(backend, model) == source


@pytest.mark.parametrize(
    ("backend", "source", "model"),
    [
        ("vllm", "hf://org/m", "org/m"),
        ("vllm", "HF://org/m", "org/m"),
        ("ollama", "ollama://llama3:8b", "llama3:8b"),
        ("vllm", "ollama://llama3:8b", "ollama://llama3:8b"),
        ("vllm", "hf://", "hf://"),
        ("vllm", "pvc://claim/path", "pvc://claim/path"),
    ],
)
def test_source_rule_back(backend: str, source: str, model: str) -> None:
    assert deployment_model(backend, source) == model


def _example(name: str) -> ModelDeployment:
    return ModelDeployment.model_validate(yaml.safe_load((EXAMPLES / name).read_text()))


def test_the_ollama_example_maps_field_by_field() -> None:
    model = to_model(_example("modeldeployment-llama3-ollama.yaml"))
    spec = model.spec
    assert (spec.backend, spec.source) == ("ollama", "ollama://llama3:8b")
    assert spec.gpu is not None
    assert (spec.gpu.vendor, spec.gpu.count, spec.gpu.shared) == (
        GPUVendor.NVIDIA,
        1,
        "rtx4090-pool",
    )
    assert (spec.gpu.priority, spec.gpu.vram_estimate_mb) == (200, 6000)
    serverless = spec.serverless_or_default
    assert (serverless.min_replicas, serverless.max_replicas) == (0, 1)
    assert serverless.idle_timeout == timedelta(minutes=10)
    assert serverless.cold_start_timeout == timedelta(minutes=2)
    assert spec.resources is not None
    assert spec.resources.limits == {"memory": "16Gi"}
    assert spec.litellm is not None
    assert spec.litellm.aliases == ["llama3"]
    assert spec.service_labels == ["textgen", "fast"]
    # benchmark has no v1alpha2 counterpart: it is kept in the annotation.
    kept = json.loads(model.metadata.annotations[V1ALPHA1_ANNOTATION])
    assert kept["spec"] == {
        "benchmark": {"batchSize": 64, "iterations": 5, "minDuration": None, "warmupIterations": 2}
    }


def test_vllm_settings_become_config_keys() -> None:
    model = to_model(_example("modeldeployment-qwen-vllm.yaml"))
    assert model.spec.source == "hf://Qwen/Qwen2.5-Coder-7B-Instruct"
    assert model.spec.config == {
        "dtype": "bfloat16",
        "maxModelLen": 16384,
        "gpuMemoryUtilization": "0.85",
        "enablePrefixCaching": True,
        "kvCacheDtype": "fp8",
    }


def test_mlc_overrides_flatten_into_config() -> None:
    md = ModelDeployment.model_validate(
        {
            "metadata": {"name": "m"},
            "spec": {
                "backend": "mlc",
                "model": "org/m",
                "mlcllm": {"mode": "server", "overrides": {"maxNumSequence": 8, "raw": "x=1"}},
            },
        }
    )
    model = to_model(md)
    assert model.spec.config == {"mode": "server", "maxNumSequence": 8, "overridesRaw": "x=1"}
    assert V1ALPHA1_ANNOTATION not in model.metadata.annotations
    assert to_model_deployment(model) == md


def test_an_edit_to_the_model_wins_over_the_kept_values() -> None:
    md = _example("modeldeployment-llama3-ollama.yaml").model_copy(deep=True)
    md.spec.replicas = 12  # above v1alpha2's maxReplicas bound: kept in the annotation
    model = to_model(md)
    assert model.spec.serverless_or_default.max_replicas == 10
    assert to_model_deployment(model).spec.replicas == 12
    edited = model.model_copy(deep=True)
    assert edited.spec.serverless is not None
    edited.spec.serverless.max_replicas = 3
    back = to_model_deployment(edited)
    assert back.spec.replicas == 3, "the edit must not be overwritten by the kept value"
    assert back.spec.benchmark == md.spec.benchmark, "fields without counterpart stay"


def test_a_model_with_v1alpha2_only_fields_keeps_them_in_the_deployment() -> None:
    model = Model.model_validate(yaml.safe_load((EXAMPLES / "model-llama-vllm.yaml").read_text()))
    md = to_model_deployment(model)
    assert md.spec.model == "meta-llama/Llama-3.1-8B-Instruct"
    assert md.spec.gpu_group_ref == "rtx4090-pool"
    assert md.spec.resources is not None
    assert md.spec.resources.limits["nvidia.com/gpu"] == 1
    kept = json.loads(md.metadata.annotations[V1ALPHA2_ANNOTATION])
    assert {"cache", "kvCache", "tolerations", "capabilities"} <= kept["spec"].keys()
    assert to_model(md) == model


def test_metadata_and_finalizers_are_copied() -> None:
    md = _example("modeldeployment-qwen-vllm.yaml").model_copy(deep=True)
    md.metadata.finalizers = ["flexinfer.ai/cleanup"]
    md.metadata.labels = {"app": "qwen"}
    model = to_model(md)
    assert model.metadata.finalizers == ["flexinfer.ai/cleanup"]
    assert model.metadata.labels == {"app": "qwen"}


def test_a_garbled_annotation_is_an_invalid_spec() -> None:
    model = Model.model_validate(
        {
            "metadata": {"name": "m", "annotations": {V1ALPHA1_ANNOTATION: "{not json"}},
            "spec": {"backend": "vllm", "source": "hf://a/b"},
        }
    )
    with pytest.raises(InvalidSpecError, match="not JSON"):
        to_model_deployment(model)


def test_a_deployment_without_a_valid_model_form_is_an_invalid_spec() -> None:
    md = ModelDeployment.model_validate(
        {"metadata": {"name": "m"}, "spec": {"backend": "vllm", "model": "a" * 2048}}
    )
    with pytest.raises(InvalidSpecError, match="cannot convert to Model"):
        to_model(md)


def test_examples_exist(tmp_path: Path) -> None:
    assert sorted(p.name for p in EXAMPLES.glob("modeldeployment-*.yaml")) == [
        "modeldeployment-llama3-ollama.yaml",
        "modeldeployment-qwen-vllm.yaml",
    ]
