"""apply_defaults and pruned_fields: the API server's treatment of an object, from its schema."""

from __future__ import annotations

import copy
from typing import Any

from flexinfer_common.crd import kind_description, model_crd
from flexinfer_common.crd_defaults import apply_defaults, pruned_fields
from flexinfer_common.crd_schema import structural_schema

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "a": {"type": "integer", "default": 1},
        "obj": {
            "type": "object",
            "default": {},
            "properties": {"b": {"type": "string", "default": "x"}, "c": {"type": "string"}},
        },
        "absent": {"type": "object", "properties": {"d": {"type": "integer", "default": 4}}},
        "list": {
            "type": "array",
            "items": {"type": "object", "properties": {"e": {"type": "boolean", "default": True}}},
        },
        "map": {
            "type": "object",
            "additionalProperties": {
                "type": "object",
                "properties": {"f": {"type": "integer", "default": 6}},
            },
        },
        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
    },
}


def test_defaults_fill_present_parents_and_the_defaults_they_add() -> None:
    doc: dict[str, Any] = {"list": [{}, {"e": False}], "map": {"k": {}}, "obj": None}
    before = copy.deepcopy(doc)
    out = apply_defaults(doc, SCHEMA)
    assert doc == before, "the input must not change"
    assert out == {
        "a": 1,
        "obj": {"b": "x"},  # null is dropped, then defaulted; the default is walked into
        "list": [{"e": True}, {"e": False}],
        "map": {"k": {"f": 6}},
    }
    assert "absent" not in out, "an absent parent stays absent"


def test_pruned_fields() -> None:
    doc = {
        "a": 1,
        "zz": 2,
        "obj": {"c": "y", "q": 1},
        "list": [{"e": True, "r": 0}],
        "free": {"any": 1},
    }
    assert pruned_fields(doc, SCHEMA) == [".zz", ".obj.q", ".list[0].r"]


def test_model_defaults_as_a_cluster_stores_them() -> None:
    schema = model_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    doc = {
        "spec": {
            "backend": "vllm",
            "source": "hf://a/b",
            "gpu": {},
            "serverless": {"enabled": False},
        }
    }
    out = apply_defaults(doc, schema)
    assert out["spec"]["gpu"] == {"vendor": "auto", "priority": 100}
    assert out["spec"]["serverless"]["idleTimeout"] == "5m0s"
    assert out["spec"]["serverless"]["enabled"] is False
    assert "cache" not in out["spec"]


def test_extra_allow_types_keep_unknown_fields_beside_their_properties() -> None:
    schema = structural_schema(kind_description("ModelDeployment").type)
    vllm = schema["properties"]["spec"]["properties"]["vllm"]
    assert vllm["type"] == "object"
    assert vllm["x-kubernetes-preserve-unknown-fields"] is True
    assert vllm["properties"]["maxModelLen"] == {
        "type": "integer",
        "minimum": 256,
        "maximum": 131072,
    }
