"""Endpoint records on Kubernetes: one ConfigMap per Model, one data key per replica.

Why a ConfigMap and not the Model's status: the Model CRD's status has no place for
per-replica records (and the CRDs are generated from the API types), and writing them
there would bump the Model's resourceVersion at every readiness flap, so that every
status writer would keep losing its compare-and-swap, and every watcher of Models would
wake up. A ConfigMap per Model keeps them apart, is namespaced like the Model, and is
readable with ``kubectl get configmap -l flexinfer.ai/role=endpoints``. Each replica is
one key, changed with a JSON merge patch of that key alone, so replicas never overwrite
each other and no read-modify-write is needed. The value is the record as JSON.
"""

from __future__ import annotations

import hashlib
import json
import re
from datetime import datetime
from typing import Any

from flexinfer_common.errors import ConflictError, NotFoundError, StoreError
from flexinfer_common.kube.client import MERGE_PATCH, KubeClient
from flexinfer_common.store.base import EndpointRecord

MANAGED_BY = {"app.kubernetes.io/managed-by": "flexinfer-controller"}
ROLE_LABEL, ROLE = "flexinfer.ai/role", "endpoints"
MODEL_ANNOTATION = "flexinfer.ai/model"
"""namespace/name of the Model whose replicas the ConfigMap lists."""
_KEY = re.compile(r"^[-._a-zA-Z0-9]{1,253}$")
_PREFIX = "flexinfer-endpoints-"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def configmap_name(model_name: str) -> str:
    """The ConfigMap of one Model (names past the 253-character limit end in a hash)."""
    name = _PREFIX + model_name
    if len(name) <= 253:
        return name
    return f"{name[:240]}-{_digest(model_name)}"


def data_key(replica: str) -> str:
    """The ConfigMap key of one replica (ids that are not valid keys become a hash)."""
    return replica if _KEY.match(replica) else f"replica-{_digest(replica)}"


def _encode(record: EndpointRecord) -> str:
    return json.dumps(
        {
            "replica": record.replica,
            "url": record.url,
            "ready": record.ready,
            "node": record.node,
            "updatedAt": record.updated_at.isoformat(),
        }
    )


def _decode(model: str, value: str) -> EndpointRecord:
    try:
        data: dict[str, Any] = json.loads(value)
        return EndpointRecord(
            model=model,
            replica=str(data["replica"]),
            url=str(data["url"]),
            ready=bool(data["ready"]),
            node=data.get("node"),
            updated_at=datetime.fromisoformat(data["updatedAt"]),
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise StoreError(f"endpoint record of {model} is invalid: {exc}") from exc


def _split(model: str) -> tuple[str, str]:
    namespace, _, name = model.partition("/")
    if not name:
        raise StoreError(f"endpoint model {model!r} is not namespace/name")
    return namespace, name


class ConfigMapEndpoints:
    """put/delete/list of endpoint records in per-Model ConfigMaps."""

    def __init__(self, client: KubeClient) -> None:
        self._client = client

    async def put(self, record: EndpointRecord) -> None:
        """Set this replica's key; create the ConfigMap first if the Model has none."""
        namespace, name = _split(record.model)
        patch = {"data": {data_key(record.replica): _encode(record)}}
        for _ in range(3):
            try:
                await self._patch(namespace, name, patch)
                return
            except NotFoundError:
                pass
            try:
                await self._create(namespace, name, record.model, patch["data"])
                return
            except ConflictError:
                continue  # created by another writer meanwhile: patch it
        raise StoreError(f"endpoint ConfigMap of {record.model} kept appearing and vanishing")

    async def delete(self, model: str, replica: str) -> None:
        """Remove this replica's key, if any."""
        namespace, name = _split(model)
        try:
            await self._patch(namespace, name, {"data": {data_key(replica): None}})
        except NotFoundError:
            return

    async def drop_model(self, model: str) -> None:
        """Delete the Model's ConfigMap, if any."""
        namespace, name = _split(model)
        core = self._client.core
        try:
            await self._client.call(
                "delete configmaps",
                core.delete_namespaced_config_map,
                configmap_name(name),
                namespace,
            )
        except NotFoundError:
            return

    async def list(self, model: str | None) -> list[EndpointRecord]:
        """The records of one Model, or of all, ordered by (model, replica)."""
        core = self._client.core
        if model is not None:
            namespace, name = _split(model)
            try:
                found = await self._client.call(
                    "get configmaps",
                    core.read_namespaced_config_map,
                    configmap_name(name),
                    namespace,
                )
            except NotFoundError:
                return []
            maps = [found]
        else:
            selector = f"{ROLE_LABEL}={ROLE}"
            listed = await self._client.call(
                "list configmaps", core.list_config_map_for_all_namespaces, label_selector=selector
            )
            maps = list(listed.items)
        records: list[EndpointRecord] = []
        for cm in maps:
            owner = (cm.metadata.annotations or {}).get(MODEL_ANNOTATION)
            if owner is None or (model is not None and owner != model):
                continue
            records.extend(_decode(owner, value) for value in (cm.data or {}).values())
        return sorted(records, key=lambda r: (r.model, r.replica))

    async def _patch(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        core = self._client.core
        await self._client.call(
            "patch configmaps",
            core.patch_namespaced_config_map,
            configmap_name(name),
            namespace,
            patch,
            _content_type=MERGE_PATCH,
        )

    async def _create(self, namespace: str, name: str, model: str, data: dict[str, str]) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": configmap_name(name),
                "namespace": namespace,
                "labels": {**MANAGED_BY, ROLE_LABEL: ROLE},
                "annotations": {MODEL_ANNOTATION: model},
            },
            "data": data,
        }
        core = self._client.core
        await self._client.call(
            "create configmaps", core.create_namespaced_config_map, namespace, body
        )
