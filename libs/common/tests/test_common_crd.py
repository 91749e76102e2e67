"""The generated CRD: committed copy up to date, structural, and accepting real manifests."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from flexinfer_common.api.lora import LoRAAdapter
from flexinfer_common.api.model import Model
from flexinfer_common.crd import (
    KINDS,
    KindDescription,
    lora_adapter_crd,
    main,
    model_crd,
    render_crds,
    structural_schema,
    write_crds,
)
from flexinfer_testing.repo import repo_root

ROOT = repo_root()
CRD_DIR = ROOT / "k8s" / "crds"
EXAMPLES = sorted((ROOT / "k8s" / "examples").glob("model-*.yaml"))
LORA_EXAMPLES = sorted((ROOT / "k8s" / "examples").glob("loraadapter-*.yaml"))
GENERATED = [
    "ai.flexinfer_models.yaml",
    "ai.flexinfer_loraadapters.yaml",
    "ai.flexinfer_modelcatalogs.yaml",
    "ai.flexinfer_modeldeployments.yaml",
    "ai.flexinfer_modelcaches.yaml",
    "ai.flexinfer_gpugroups.yaml",
]


def _schema(crd: dict[str, Any] | None = None) -> dict[str, Any]:
    crd = crd if crd is not None else model_crd()
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def _walk(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, node
    for name, sub in node.get("properties", {}).items():
        yield from _walk(sub, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        yield from _walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from _walk(node["additionalProperties"], f"{path}{{}}")


def test_committed_crds_match_the_types() -> None:
    rendered = render_crds()
    assert rendered, "render_crds produced nothing"
    for name, text in rendered.items():
        path = CRD_DIR / name
        assert path.is_file(), f"{path} is missing: run `./dev crds`"
        assert path.read_text(encoding="utf-8") == text, f"{path} is stale: run `./dev crds`"
    assert write_crds(CRD_DIR, check=True) == []


def test_write_crds_reports_drift_and_fixes_it(tmp_path: Path) -> None:
    expected = [tmp_path / name for name in GENERATED]
    assert write_crds(tmp_path, check=True) == expected
    assert not any(tmp_path.iterdir()), "check=True must write nothing"
    written = write_crds(tmp_path, check=False)
    assert written == expected
    assert write_crds(tmp_path, check=True) == []
    for path in written:
        path.write_text(path.read_text() + "# edited\n")
        assert write_crds(tmp_path, check=True) == [path]
        assert write_crds(tmp_path, check=False) == [path]


def test_main_check_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--check", "--out", str(tmp_path)]) == 1
    assert "out of date" in capsys.readouterr().err
    assert main(["--out", str(tmp_path)]) == 0
    assert main(["--check", "--out", str(tmp_path)]) == 0


def test_crd_names_and_columns() -> None:
    crd = model_crd()
    spec = crd["spec"]
    assert crd["metadata"]["name"] == "models.ai.flexinfer"
    assert spec["names"] == {
        "kind": "Model",
        "listKind": "ModelList",
        "plural": "models",
        "singular": "model",
        "shortNames": ["mdl"],
    }
    assert spec["scope"] == "Namespaced"
    (version,) = spec["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1alpha2", True, True)
    assert version["subresources"] == {"status": {}}
    columns = {
        c["name"]: (c["jsonPath"], c.get("priority", 0))
        for c in version["additionalPrinterColumns"]
    }
    assert columns == {
        "Backend": (".spec.backend", 0),
        "Phase": (".status.phase", 0),
        "Shared": (".spec.gpu.shared", 1),
        "Priority": (".spec.gpu.priority", 1),
        "TPS": (".status.metrics.tokensPerSecond", 0),
        "Age": (".metadata.creationTimestamp", 0),
    }


def test_lora_adapter_crd_names_and_columns() -> None:
    crd = lora_adapter_crd()
    spec = crd["spec"]
    assert crd["metadata"]["name"] == "loraadapters.ai.flexinfer"
    assert spec["names"] == {
        "kind": "LoRAAdapter",
        "listKind": "LoRAAdapterList",
        "plural": "loraadapters",
        "singular": "loraadapter",
        "shortNames": ["lora"],
    }
    (version,) = spec["versions"]
    assert version["subresources"] == {"status": {}}
    columns = [(c["name"], c["jsonPath"]) for c in version["additionalPrinterColumns"]]
    assert columns == [
        ("Model", ".spec.modelRef"),
        ("Adapter", ".spec.adapterName"),
        ("Phase", ".status.phase"),
        ("Loaded", ".status.loadedReplicas"),
    ]
    schema = _schema(crd)
    assert schema["properties"]["spec"]["required"] == ["modelRef", "adapterName", "source"]
    source = schema["properties"]["spec"]["properties"]["source"]
    assert source["required"] == ["type", "uri"]
    assert source["properties"]["type"]["enum"] == ["HuggingFace", "OCI", "LocalPath"]
    status = schema["properties"]["status"]["properties"]
    assert status["phase"]["enum"] == ["Pending", "Caching", "Loaded", "Unloading", "Failed"]
    assert {"conditions", "loadedReplicas", "totalReplicas", "message"} <= status.keys()


@pytest.mark.parametrize("desc", KINDS, ids=lambda d: d.kind)
def test_schema_is_structural(desc: KindDescription) -> None:
    schema = structural_schema(desc.type)
    assert schema["properties"]["metadata"] == {"type": "object"}
    for path, node in _walk(schema):
        for banned in ("$ref", "$defs", "anyOf", "oneOf", "allOf", "title", "const", "nullable"):
            assert banned not in node, f"{path}: {banned} is not allowed"
        assert node.get("type") or node.get("x-kubernetes-int-or-string"), f"{path}: untyped"
        if node.get("x-kubernetes-int-or-string"):
            assert "type" not in node, f"{path}: int-or-string must not also have a type"
        assert not ("properties" in node and "additionalProperties" in node), path
        assert node.get("default", 0) is not None, f"{path}: null default"
        if "enum" in node and "default" in node:
            assert node["default"] in node["enum"], path


def test_schema_keeps_types_defaults_and_free_form_fields() -> None:
    spec = _schema()["properties"]["spec"]
    props = spec["properties"]
    assert spec["required"] == ["backend", "source"]
    assert props["config"] == {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    assert props["quantize"] == {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    assert props["gpu"]["properties"]["vendor"]["enum"] == ["auto", "nvidia", "amd", "cpu"]
    assert props["gpu"]["properties"]["priority"]["default"] == 100
    serverless = props["serverless"]["properties"]
    assert serverless["idleTimeout"]["default"] == "5m0s"
    # No default: unset means "the proxy's timeout", and a value is honoured as given.
    assert "default" not in serverless["coldStartTimeout"]
    assert serverless["coldStartTimeout"]["type"] == "string"
    assert props["resources"]["properties"]["limits"]["additionalProperties"] == {
        "x-kubernetes-int-or-string": True
    }
    assert props["kvCache"]["properties"]["highWatermark"] == {"x-kubernetes-int-or-string": True}
    status = _schema()["properties"]["status"]["properties"]
    assert {"replicas", "readyReplicas", "desiredReplicas"} <= status.keys()


def test_schema_defaults_agree_with_pydantic() -> None:
    # A manifest with every defaulted parent present: pydantic and the CRD must fill the same.
    bare = Model.model_validate(
        {
            "metadata": {"name": "m"},
            "spec": {"backend": "vllm", "source": "HF://a/b", "serverless": {}, "gpu": {}},
        }
    ).model_dump(mode="json", by_alias=True)
    props = _schema()["properties"]["spec"]["properties"]
    for group in ("serverless", "gpu"):
        for field, sub in props[group]["properties"].items():
            if "default" in sub:
                assert bare["spec"][group][field] == sub["default"], f"{group}.{field}"


def _unknown_fields(doc: Any, node: dict[str, Any], path: str = "") -> list[str]:
    """Fields the API server would silently prune: what the schema does not declare."""
    if node.get("x-kubernetes-preserve-unknown-fields") or not isinstance(doc, dict | list):
        return []
    if isinstance(doc, list):
        return [
            u for i, v in enumerate(doc) for u in _unknown_fields(v, node["items"], f"{path}[{i}]")
        ]
    if "properties" not in node:
        extra = node.get("additionalProperties")
        return (
            [u for k, v in doc.items() for u in _unknown_fields(v, extra, f"{path}.{k}")]
            if isinstance(extra, dict)
            else []
        )
    out = [f"{path}.{k}" for k in doc if k not in node["properties"]]
    for key, value in doc.items():
        if key in node["properties"]:
            out += _unknown_fields(value, node["properties"][key], f"{path}.{key}")
    return out


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_manifests_validate(path: Path) -> None:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    assert docs
    for doc in docs:
        jsonschema.Draft7Validator(_schema()).validate(doc)
        assert _unknown_fields(doc, _schema()) == []
        model = Model.model_validate(doc)
        assert model.spec.source == doc["spec"]["source"]


def test_examples_exist() -> None:
    names = {p.name for p in EXAMPLES}
    assert {"model-tiny.yaml", "model-llama-vllm.yaml"} <= names
    assert LORA_EXAMPLES, "no LoRAAdapter example"


@pytest.mark.parametrize("path", LORA_EXAMPLES, ids=lambda p: p.name)
def test_lora_adapter_examples_validate(path: Path) -> None:
    schema = _schema(lora_adapter_crd())
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    assert docs
    for doc in docs:
        jsonschema.Draft7Validator(schema).validate(doc)
        assert _unknown_fields(doc, schema) == []
        adapter = LoRAAdapter.model_validate(doc)
        assert adapter.spec.adapter_name == doc["spec"]["adapterName"]


@pytest.mark.parametrize(
    ("where", "value"),
    [
        (("modelRef",), "Not_A_Name"),
        (("source", "type"), "S3"),
        (("maxRank",), 0),
        (("adapterName",), ""),
    ],
)
def test_lora_schema_rejects_what_pydantic_rejects(where: tuple[str, ...], value: Any) -> None:
    doc = yaml.safe_load(LORA_EXAMPLES[0].read_text())
    target = doc["spec"]
    for key in where[:-1]:
        target = target[key]
    target[where[-1]] = value
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft7Validator(_schema(lora_adapter_crd())).validate(doc)
    with pytest.raises(ValueError, match="validation error"):
        LoRAAdapter.model_validate(doc)


@pytest.mark.parametrize(
    ("where", "value"),
    [
        (("gpu", "vendor"), "intel"),
        (("gpu", "priority"), 2000),
        (("serverless", "idleTimeout"), "five minutes"),
        (("serviceLabels",), [str(i) for i in range(11)]),
        (("cache", "strategy"), "Disk"),
    ],
)
def test_schema_rejects_what_pydantic_rejects(where: tuple[str, ...], value: Any) -> None:
    doc = yaml.safe_load((ROOT / "k8s/examples/model-llama-vllm.yaml").read_text())
    bad = copy.deepcopy(doc)
    target = bad["spec"]
    for key in where[:-1]:
        target = target[key]
    target[where[-1]] = value
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft7Validator(_schema()).validate(bad)
    with pytest.raises(ValueError, match="validation error"):
        Model.model_validate(bad)


def test_unknown_field_is_reported() -> None:
    doc = {
        "apiVersion": "ai.flexinfer/v1alpha2",
        "kind": "Model",
        "metadata": {"name": "x"},
        "spec": {"backend": "vllm", "source": "HF://a/b", "image": "vllm:latest"},
    }
    assert _unknown_fields(doc, _schema()) == [".spec.image"]


def test_crd_validates_against_kubernetes_schema() -> None:
    for text in render_crds().values():
        crd = yaml.safe_load(text)
        kubernetes_validate.validate(crd, kubernetes_validate.latest_version(), strict=True)


def test_structural_schema_of_model_is_stable() -> None:
    assert structural_schema(Model) == _schema()
