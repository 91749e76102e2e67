"""The FlexInfer custom resources the controller reads and writes."""

from __future__ import annotations

from flexinfer_common.api import API_GROUP, CATALOG_KIND, LORA_KIND
from flexinfer_common.kube.client import Resource

VERSION = "v1alpha2"
MODELS = Resource(API_GROUP, VERSION, "models", "Model")
LORA_ADAPTERS = Resource(API_GROUP, VERSION, "loraadapters", LORA_KIND)
MODEL_CATALOGS = Resource(API_GROUP, VERSION, "modelcatalogs", CATALOG_KIND)
MODEL_FINALIZER = "flexinfer.ai/model-cleanup"
"""Held on a Model while its replicas and caches still need cleaning up."""
