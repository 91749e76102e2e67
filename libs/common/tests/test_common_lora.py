"""The LoRAAdapter API type: defaults, wire names and what it refuses."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from flexinfer_common.api import LoRAAdapter, LoRAAdapterPhase, LoRASourceType


def doc(**spec: Any) -> dict[str, Any]:
    """A minimal LoRAAdapter document with ``spec`` overrides."""
    body: dict[str, Any] = {
        "modelRef": "llama",
        "adapterName": "sql-lora",
        "source": {"type": "HuggingFace", "uri": "org/sql-lora"},
    }
    body.update(spec)
    return {"apiVersion": "ai.flexinfer/v1alpha2", "kind": "LoRAAdapter",
            "metadata": {"name": "sql", "namespace": "ml"}, "spec": body}  # fmt: skip


def test_defaults_and_wire_names() -> None:
    adapter = LoRAAdapter.model_validate(doc(maxRank=16))
    assert adapter.key == "ml/sql"
    assert adapter.model_key == "ml/llama"
    assert adapter.spec.source.type is LoRASourceType.HUGGING_FACE
    assert adapter.status.phase is LoRAAdapterPhase.PENDING
    out = adapter.model_dump(mode="json", by_alias=True, exclude_none=True)
    assert out["spec"] == {**doc(maxRank=16)["spec"], "preload": False}
    assert out["status"]["loadedReplicas"] == 0
    assert LoRAAdapter.model_validate(out) == adapter


@pytest.mark.parametrize(
    "name",
    ["org/sql-lora", "sql_lora:v2", "Llama-SQL.1", "a" * 256],
)
def test_adapter_names_accepted(name: str) -> None:
    assert LoRAAdapter.model_validate(doc(adapterName=name)).spec.adapter_name == name


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("", "at least 1"),
        ("a" * 257, "at most 256"),
        ("bad\x00name", "control"),
        ("bad\nname", "control"),
        ("bad name", "whitespace"),
        ("../etc/passwd", "'..'"),
        ("/abs", "start with '/'"),
    ],
)
def test_adapter_names_refused(name: str, why: str) -> None:
    with pytest.raises(ValidationError, match=why):
        LoRAAdapter.model_validate(doc(adapterName=name))


@pytest.mark.parametrize(
    "spec",
    [
        {"modelRef": "Llama_3"},
        {"modelRef": ""},
        {"source": {"type": "S3", "uri": "s3://x"}},
        {"source": {"type": "OCI"}},
        {"source": {"type": "OCI", "uri": "reg/x:1\x07"}},
        {"maxRank": 0},
        {"image": "vllm"},
    ],
)
def test_bad_specs_refused(spec: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        LoRAAdapter.model_validate(doc(**spec))


def test_missing_required_fields_refused() -> None:
    body = doc()
    del body["spec"]["adapterName"]
    with pytest.raises(ValidationError, match="adapterName"):
        LoRAAdapter.model_validate(body)
