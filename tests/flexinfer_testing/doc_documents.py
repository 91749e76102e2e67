"""Validate the YAML and JSON documents the docs and k8s/examples show, with the project's parsers.

A FlexInfer object (``apiVersion: ai.flexinfer/…``) goes through the controller's own
document parser, the one its admin API runs on a request body: strict YAML (no duplicate
keys, aliases or merge keys), then the pydantic API types. Another Kubernetes object is
checked against the official schemas (kubernetes-validate); an error body against
``ErrorBody``, the shape every API answers errors with. Anything else (a Prometheus scrape
config, say) must at least parse.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import kubernetes_validate
import yaml

from flexinfer_common.api import API_VERSION, LORA_KIND
from flexinfer_common.api.meta import ApiModel
from flexinfer_common.web import ErrorBody
from flexinfer_controller.core.documents import Format, decode, parse_adapter, parse_model

PARSERS: dict[str, Callable[..., ApiModel]] = {"Model": parse_model, LORA_KIND: parse_adapter}
"""The controller's parser for each FlexInfer kind its admin API accepts."""


def api_object(text: str, fmt: Format) -> ApiModel:
    """One FlexInfer document, as the controller's admin API would accept it (or raise)."""
    doc = decode(text.encode(), fmt)
    parse = PARSERS.get(str(doc.get("kind")))
    if parse is None:
        raise AssertionError(f"kind {doc.get('kind')!r} is not one of {sorted(PARSERS)}")
    return parse(doc, namespace=None, default_namespace="default")


def validate_document(text: str, fmt: Format) -> list[str]:
    """Validate every document in ``text``; what each was checked as (raises if invalid)."""
    docs = [json.loads(text)] if fmt == "json" else list(yaml.safe_load_all(text))
    checked = []
    for doc in docs:
        if isinstance(doc, dict) and str(doc.get("apiVersion", "")).startswith("ai.flexinfer/"):
            if len(docs) != 1:
                raise AssertionError("the admin API takes one document per request")
            assert doc["apiVersion"] == API_VERSION, f"{doc['apiVersion']} is not {API_VERSION}"
            api_object(text, fmt)
            checked.append(f"{doc['kind']} (controller parser)")
        elif isinstance(doc, dict) and {"apiVersion", "kind"} <= doc.keys():
            kubernetes_validate.validate(doc, kubernetes_validate.latest_version(), strict=True)
            checked.append(f"{doc['kind']} (Kubernetes schema)")
        elif isinstance(doc, dict) and doc.keys() == {"error"}:
            body = ErrorBody.model_validate(doc)
            assert body.model_dump() == doc, f"fields beyond ErrorBody's: {doc}"
            checked.append("ErrorBody")
        else:
            checked.append(f"{fmt} (syntax)")
    return checked
