"""Every generated CRD: names, versions and columns as the operator's, valid for Kubernetes
1.31, and accepting every example manifest (k8s/examples, the API reference, the docs) after
the defaulting the API server would apply."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from pydantic import BaseModel

from flexinfer_common.crd import KINDS, KindDescription, crd_of, kind_description, render_crds
from flexinfer_common.crd_defaults import apply_defaults, pruned_fields
from flexinfer_testing.repo import repo_root

ROOT = repo_root()
EXAMPLES = sorted((ROOT / "k8s" / "examples").glob("*.yaml"))
K8S_VERSION = "1.31"

# (version, short names, columns) per kind: shared/reference/flexinfer-api.md §1, §2, §3.
EXPECTED: dict[str, tuple[str, list[str], list[tuple[str, str, str]]]] = {
    "Model": (
        "v1alpha2",
        ["mdl"],
        [
            ("Backend", "string", ".spec.backend"),
            ("Phase", "string", ".status.phase"),
            ("Shared", "string", ".spec.gpu.shared"),
            ("Priority", "integer", ".spec.gpu.priority"),
            ("TPS", "string", ".status.metrics.tokensPerSecond"),
            ("Age", "date", ".metadata.creationTimestamp"),
        ],
    ),
    "LoRAAdapter": (
        "v1alpha2",
        ["lora"],
        [
            ("Model", "string", ".spec.modelRef"),
            ("Adapter", "string", ".spec.adapterName"),
            ("Phase", "string", ".status.phase"),
            ("Loaded", "integer", ".status.loadedReplicas"),
        ],
    ),
    "ModelCatalog": (
        "v1alpha2",
        ["mcat"],
        [
            ("Models", "integer", ".status.totalModels"),
            ("LastSync", "date", ".status.lastSyncTime"),
        ],
    ),
    "ModelDeployment": (
        "v1alpha1",
        ["mdep"],
        [
            ("Backend", "string", ".spec.backend"),
            ("Model", "string", ".spec.model"),
            ("Replicas", "integer", ".spec.replicas"),
            ("TPS", "string", ".status.tokensPerSecond"),
        ],
    ),
    "ModelCache": (
        "v1alpha1",
        ["mcache"],
        [
            ("Phase", "string", ".status.phase"),
            ("Strategy", "string", ".spec.storageStrategy"),
            ("Ready", "integer", ".status.readyNodes"),
            ("Total", "integer", ".status.totalNodes"),
            ("Path", "string", ".status.path"),
        ],
    ),
    "GPUGroup": (
        "v1alpha1",
        ["gpug"],
        [
            ("Phase", "string", ".status.phase"),
            ("Active", "string", ".status.activeModel"),
            ("Swaps", "integer", ".status.swapCount"),
            ("Strategy", "string", ".spec.scalingPolicy.strategy"),
        ],
    ),
}


def _schema(kind: str) -> dict[str, Any]:
    (version,) = crd_of(kind_description(kind))["spec"]["versions"]
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return schema


def _paths(node: dict[str, Any], path: str = "") -> dict[str, dict[str, Any]]:
    out = {path: node}
    for name, sub in node.get("properties", {}).items():
        out |= _paths(sub, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        out |= _paths(node["items"], f"{path}[]")
    return out


def test_every_kind_has_a_crd() -> None:
    assert [d.kind for d in KINDS] == list(EXPECTED)
    assert len(render_crds()) == len(EXPECTED)


@pytest.mark.parametrize("desc", KINDS, ids=lambda d: d.kind)
def test_crd_names_versions_and_columns(desc: KindDescription) -> None:
    version_name, short_names, columns = EXPECTED[desc.kind]
    spec = crd_of(desc)["spec"]
    assert spec["group"] == "ai.flexinfer"
    assert spec["scope"] == "Namespaced"
    assert spec["names"]["kind"] == desc.kind
    assert spec["names"]["plural"] == f"{desc.kind.lower()}s"
    assert spec["names"]["shortNames"] == short_names
    (version,) = spec["versions"]
    assert (version["name"], version["served"], version["storage"]) == (version_name, True, True)
    assert version["subresources"] == {"status": {}}
    got = [(c["name"], c["type"], c["jsonPath"]) for c in version["additionalPrinterColumns"]]
    assert got == columns
    schema = version["schema"]["openAPIV3Schema"]
    for _, _, json_path in columns:
        if not json_path.startswith(".metadata."):
            assert json_path in _paths(schema), f"column path {json_path} is not in the schema"


@pytest.mark.parametrize("name", sorted(render_crds()))
def test_crd_is_valid_for_kubernetes_1_31(name: str) -> None:
    crd = yaml.safe_load(render_crds()[name])
    kubernetes_validate.validate(crd, K8S_VERSION, strict=True)


def test_kubernetes_validate_rejects_a_broken_crd() -> None:
    crd = crd_of(kind_description("GPUGroup"))
    crd["spec"]["versions"][0]["served"] = "yes"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(crd, K8S_VERSION, strict=True)


@pytest.mark.parametrize(
    ("kind", "path", "default"),
    [
        ("ModelDeployment", ".spec.replicas", 1),
        ("ModelDeployment", ".spec.minReplicas", 0),
        ("ModelDeployment", ".spec.idleTimeoutSeconds", 300),
        ("ModelDeployment", ".spec.coldStartTimeoutSeconds", 60),
        ("ModelDeployment", ".spec.priority", 100),
        ("ModelDeployment", ".spec.benchmark.batchSize", 128),
        ("ModelDeployment", ".spec.litellm.enabled", True),
        ("ModelCache", ".spec.storageStrategy", "Auto"),
        ("ModelCache", ".spec.storageSize", "50Gi"),
        ("GPUGroup", ".spec.models[].priority", 100),
        ("GPUGroup", ".spec.scalingPolicy.strategy", "Exclusive"),
        ("GPUGroup", ".spec.scalingPolicy.drainTimeoutSeconds", 60),
        ("GPUGroup", ".spec.antiThrashing.enabled", True),
        ("GPUGroup", ".spec.antiThrashing.hysteresisWindowSeconds", 10),
        ("GPUGroup", ".spec.autoCacheModels", False),
        ("ModelCatalog", ".spec.syncInterval", "1h0m0s"),
        ("Model", ".spec.cache.flashLoader.bufferSizeKB", 4096),
    ],
)
def test_schema_defaults_follow_the_reference(kind: str, path: str, default: Any) -> None:
    assert _paths(_schema(kind))[path]["default"] == default


@pytest.mark.parametrize(
    ("kind", "path", "expected"),
    [
        ("ModelDeployment", ".spec.coldStartTimeoutSeconds", {"minimum": 10, "maximum": 1800}),
        ("ModelDeployment", ".spec.serviceLabels", {"maxItems": 10}),
        ("ModelDeployment", ".spec.vllm.tensorParallelSize", {"minimum": 1, "maximum": 8}),
        (
            "ModelDeployment",
            ".spec.vllm.dtype",
            {"enum": ["auto", "float16", "bfloat16", "float32"]},
        ),
        ("ModelDeployment", ".spec.mlcllm.jitPolicy", {"enum": ["ON", "OFF", "REDO", "READONLY"]}),
        (
            "ModelDeployment",
            ".spec.mlcllm.overrides.maxNumSequence",
            {"minimum": 1, "maximum": 256},
        ),
        (
            "ModelDeployment",
            ".status.phase",
            {"enum": ["Pending", "Running", "Failed", "Terminating"]},
        ),
        ("ModelCatalog", ".spec.registries", {"minItems": 1}),
        ("ModelCatalog", ".spec.registries[].type", {"enum": ["OCI", "HuggingFace", "Ollama"]}),
        ("GPUGroup", ".spec.models", {"minItems": 1}),
        ("GPUGroup", ".spec.antiThrashing.requestQueueThreshold", {"minimum": 1, "maximum": 100}),
        ("GPUGroup", ".spec.scalingPolicy.preemptionPolicy", {"enum": ["Immediate", "Graceful"]}),
        ("GPUGroup", ".status.modelStatuses[].trendStability", {"minimum": 0, "maximum": 100}),
        (
            "ModelCache",
            ".status.phase",
            {"enum": ["Pending", "Initializing", "Provisioning", "Ready", "Failed"]},
        ),
    ],
)
def test_schema_validation_follows_the_reference(kind: str, path: str, expected: Any) -> None:
    node = _paths(_schema(kind))[path]
    assert {k: node.get(k) for k in expected} == expected


def test_free_form_and_partly_known_sub_specs_keep_what_they_hold() -> None:
    spec = _schema("ModelDeployment")["properties"]["spec"]["properties"]
    for name in ("llamacpp", "comfyui", "vllmOmni"):
        assert spec[name] == {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    # Only part of the operator's VLLMSpec is known: its other fields are kept, not pruned.
    assert spec["vllm"]["x-kubernetes-preserve-unknown-fields"] is True
    assert "dtype" in spec["vllm"]["properties"]
    assert spec["mlcllm"].get("x-kubernetes-preserve-unknown-fields") is None
    doc = {"spec": {"vllm": {"dtype": "auto", "speculativeConfig": "{}"}, "mlcllm": {"x": 1}}}
    assert pruned_fields(doc, _schema("ModelDeployment")) == [".spec.mlcllm.x"]


# --------------------------------------------------------------------------- examples


def _pydantic_type(kind: str) -> type[BaseModel]:
    return kind_description(kind).type


def check_manifest(doc: dict[str, Any]) -> BaseModel:
    """Validate ``doc`` as the API server would (defaults, schema, pruning) and as pydantic."""
    schema = _schema(doc["kind"])
    desc = kind_description(doc["kind"])
    assert doc["apiVersion"] == f"ai.flexinfer/{desc.version}"
    stored = apply_defaults(doc, schema)
    jsonschema.Draft7Validator(schema).validate(stored)
    assert pruned_fields(doc, schema) == [], "fields the API server would drop"
    parsed = desc.type.model_validate(doc)
    # The defaults the API server fills are the ones pydantic assumes.
    assert desc.type.model_validate(stored) == parsed
    return parsed


def _documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_applies_and_parses(path: Path) -> None:
    docs = _documents(path)
    assert docs
    for doc in docs:
        check_manifest(doc)


def test_there_is_an_example_of_every_kind() -> None:
    kinds = {d["kind"] for path in EXAMPLES for d in _documents(path)}
    assert kinds == set(EXPECTED)


def test_gpugroup_example_names_the_example_deployments() -> None:
    docs = [d for path in EXAMPLES for d in _documents(path)]
    deployments = {d["metadata"]["name"] for d in docs if d["kind"] == "ModelDeployment"}
    (group,) = [d for d in docs if d["kind"] == "GPUGroup"]
    assert {m["name"] for m in group["spec"]["models"]} == deployments
    for doc in docs:
        if doc["kind"] == "ModelDeployment":
            assert doc["spec"]["gpuGroupRef"] == group["metadata"]["name"]


FENCE = re.compile(r"^```ya?ml[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)


def yaml_blocks(markdown: str) -> list[dict[str, Any]]:
    """The FlexInfer objects in the fenced YAML blocks of a markdown text."""
    docs = [d for block in FENCE.findall(markdown) for d in yaml.safe_load_all(block)]
    return [
        d
        for d in docs
        if isinstance(d, dict) and str(d.get("apiVersion", "")).startswith("ai.flexinfer/")
    ]


def test_yaml_blocks_finds_flexinfer_objects_only() -> None:
    text = (
        "x\n```yaml\napiVersion: ai.flexinfer/v1alpha2\nkind: Model\n---\napiVersion: v1\n"
        "kind: Secret\n```\n```json\n{}\n```\n```yml\napiVersion: ai.flexinfer/v1alpha1\n"
        "kind: GPUGroup\n```\n"
    )
    assert [d["kind"] for d in yaml_blocks(text)] == ["Model", "GPUGroup"]


def _reference() -> Path | None:
    """The operator API reference (shared/reference, beside the repository), if present."""
    env = os.environ.get("FLEXINFER_API_REFERENCE")
    candidates = [Path(env)] if env else []
    candidates += [p / "shared/reference/flexinfer-api.md" for p in ROOT.parents]
    return next((p for p in candidates if p.is_file()), None)


def _markdown_examples() -> list[tuple[str, dict[str, Any]]]:
    """FlexInfer objects in fenced YAML blocks of the docs and of the API reference.

    The reference (as read) has none: its tables became the examples in k8s/examples.
    """
    sources = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    reference = _reference()
    if reference is not None:
        sources.append(reference)
    return [
        (f"{path.name}#{i}", doc)
        for path in sources
        for i, doc in enumerate(yaml_blocks(path.read_text(encoding="utf-8")))
    ]


MARKDOWN_EXAMPLES = _markdown_examples()


@pytest.mark.parametrize(("name", "doc"), MARKDOWN_EXAMPLES, ids=[n for n, _ in MARKDOWN_EXAMPLES])
def test_markdown_example_applies_and_parses(name: str, doc: dict[str, Any]) -> None:
    check_manifest(doc)
