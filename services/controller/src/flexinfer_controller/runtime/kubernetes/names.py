"""Names, labels, annotations and the owner reference of every object made for a Model.

Object names are RFC 1035 labels (a Service's name must be one, and one rule for every
kind keeps them predictable): the Model's name with dots turned into dashes, a leading
``m-`` when it starts with a digit, and a hash suffix when it would pass 63 characters.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from flexinfer_common.api import API_VERSION, Model

Obj = dict[str, Any]

MODEL_LABEL = "flexinfer.ai/model"
BACKEND_LABEL = "flexinfer.ai/backend"
COMPONENT_LABEL = "flexinfer.ai/component"
GPU_GROUP_LABEL = "flexinfer.ai/gpu-group"
CACHE_LABEL = "flexinfer.ai/cache"
MANAGED_BY = ("app.kubernetes.io/managed-by", "flexinfer-controller")
PART_OF = ("app.kubernetes.io/part-of", "flexinfer")

MODEL_KEY_ANNOTATION = "flexinfer.ai/model-key"
"""``namespace/name`` of the Model, whole (a label value holds at most 63 characters)."""
SOURCE_ANNOTATION = "flexinfer.ai/source"
SERVICE_LABELS_ANNOTATION = "flexinfer.ai/service-labels"
VRAM_ANNOTATION = "flexinfer.ai/gpu.vram-estimate-mb"
CACHE_KIND_ANNOTATION = "flexinfer.ai/cache-kind"
CACHE_PVC_ANNOTATION = "flexinfer.ai/cache-pvc"
CACHE_PATH_ANNOTATION = "flexinfer.ai/cache-path"
CACHE_DEST_ANNOTATION = "flexinfer.ai/cache-dest"
FLASH_NODES_ANNOTATION = "flexinfer.ai/flash-nodes"
"""On the Model: the nodes (comma-separated, oldest first) whose /dev/shm holds its copy.
The controller writes it (``flashnodes``); whoever else writes the Model keeps it."""

_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_MAX = 63


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def object_name(model_name: str, suffix: str = "") -> str:
    """``<model>[-suffix]`` as an RFC 1035 label (at most 63 characters)."""
    base = re.sub(r"[^a-z0-9-]", "-", model_name.lower())
    if not base[:1].isalpha():
        base = f"m-{base}"
    tail = f"-{suffix}" if suffix else ""
    if len(base) + len(tail) > _MAX or base != model_name:
        # A changed or cut name could collide with another Model's: the hash keeps them apart.
        room = _MAX - len(tail) - 9
        base = f"{base[:room].rstrip('-')}-{_digest(model_name)}"
    return f"{base}{tail}"


def label_value(text: str) -> str:
    """``text`` when it is a valid label value, else a readable prefix and a hash."""
    if len(text) <= _MAX and _LABEL_VALUE.match(text):
        return text
    cut = re.sub(r"[^-A-Za-z0-9_.]", "-", text)[: _MAX - 9].strip("-_.")
    return f"{cut}-{_digest(text)}" if cut else _digest(text)


def selector_labels(model: Model) -> dict[str, str]:
    """The labels that select a Model's engine pods (its Service's and Deployment's selector)."""
    return {MODEL_LABEL: label_value(model.metadata.name), COMPONENT_LABEL: "engine"}


def labels(model: Model, backend: str, component: str) -> dict[str, str]:
    """Workload labels: model, backend, component, GPU group, managed-by, part-of."""
    out = {
        MODEL_LABEL: label_value(model.metadata.name),
        BACKEND_LABEL: backend,
        COMPONENT_LABEL: component,
        MANAGED_BY[0]: MANAGED_BY[1],
        PART_OF[0]: PART_OF[1],
    }
    shared = model.spec.gpu.shared if model.spec.gpu else None
    if shared:
        out[GPU_GROUP_LABEL] = label_value(shared)
    return out


def owner_reference(model: Model) -> Obj:
    """The Model as controlling owner: garbage collection follows it once it is gone."""
    return {
        "apiVersion": API_VERSION,
        "kind": "Model",
        "name": model.metadata.name,
        "uid": model.metadata.uid or "",
        "controller": True,
        "blockOwnerDeletion": True,
    }


def metadata(model: Model, name: str, obj_labels: dict[str, str], annotations: Obj) -> Obj:
    """ObjectMeta of an object owned by ``model``, in its namespace."""
    return {
        "name": name,
        "namespace": model.metadata.namespace,
        "labels": obj_labels,
        "annotations": {MODEL_KEY_ANNOTATION: model.key, **annotations},
        "ownerReferences": [owner_reference(model)],
    }


def split_key(model: str) -> tuple[str, str]:
    """``namespace/name`` as (namespace, name)."""
    namespace, _, name = model.partition("/")
    return namespace, name


def deployment_ref(namespace: str, name: str) -> Obj:
    """A Deployment by name alone (to read, scale or delete it)."""
    return {"kind": "Deployment", "metadata": {"namespace": namespace, "name": name}}
