"""The Kubernetes stores: ModelCacheEntry and ModelMetadata custom resources (k8s/crds/).

Models: one ModelCacheEntry per model in the server's namespace, named ``mx-cache-`` plus
the sanitised model name plus a hash of the exact name (sanitising alone would map
``A/b`` and ``a-b`` to one entry). The claim is the create of the entry: the apiserver
answers 409 to every concurrent creator but one. The create carries no status (the status
subresource ignores it), so the entry's spec and ``claimed-at`` annotation alone read as a
complete DOWNLOADING record until the status patch lands. A retry or takeover of an
existing entry is a status patch carrying the ``resourceVersion`` it was decided on.

Sources: one ModelMetadata per worker, labelled with its source id and rank, spec and
status written together (that CRD has no status subresource), the reaper's changes guarded
by ``resourceVersion`` preconditions.
"""

from __future__ import annotations

import base64
import builtins
import contextlib
import hashlib
import logging
import re
from typing import Any

from flexinfer_common.errors import ConflictError, NotFoundError, StoreError
from flexinfer_common.kube.client import Resource
from flexinfer_common.mx_identity import SourceIdentity
from flexinfer_registry.adapters.kubernetes_api import KubeApi, KubeObjects
from flexinfer_registry.adapters.stores.rfc3339 import format_ts, parse_ts
from flexinfer_registry.core.records import (
    ModelRecord,
    ModelStatus,
    Provider,
    SourceQuery,
    SourceRecord,
    SourceStatus,
    source_sort_key,
)
from flexinfer_registry.core.store import (
    ModelRegistryStore,
    SourceStore,
    Stores,
    claimable,
    unchanged,
)
from flexinfer_registry.settings import RegistrySettings

log = logging.getLogger(__name__)

GROUP, VERSION = "ai.flexinfer", "v1alpha1"
MODEL_CACHE_ENTRY = Resource(GROUP, VERSION, "modelcacheentries", "ModelCacheEntry")
MODEL_METADATA = Resource(GROUP, VERSION, "modelmetadatas", "ModelMetadata")
MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGER = "flexinfer-registry"
CLAIMED_AT = f"{GROUP}/claimed-at"
SOURCE_LABEL = f"{GROUP}/mx-source-id"
RANK_LABEL = f"{GROUP}/worker-rank"
_ATTEMPTS = 8
"""Optimistic-concurrency retries: each lost race means another writer made progress."""
_UNSAFE = re.compile(r"[^a-z0-9-]+")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?)?$")


def object_name(prefix: str, text: str, key: str) -> str:
    """A DNS-1123 label: ``prefix`` + readable part of ``text`` + a hash of ``key``."""
    digest = hashlib.sha256(key.encode()).hexdigest()[:10]
    readable = _UNSAFE.sub("-", text.lower()).strip("-")[: 63 - len(prefix) - 11].strip("-")
    return f"{prefix}{readable}-{digest}" if readable else f"{prefix}{digest}"


def _label_value(value: str) -> str:
    """``value`` when it is a valid label value, else a hash of it."""
    return value if _LABEL_VALUE.match(value) else hashlib.sha256(value.encode()).hexdigest()[:40]


class KubernetesModelStore(ModelRegistryStore):
    """Cached-model records as ModelCacheEntry objects."""

    def __init__(self, api: KubeApi, namespace: str) -> None:
        self._api = api
        self._objects: KubeObjects = api.objects(MODEL_CACHE_ENTRY, namespace)

    @staticmethod
    def object_name(name: str) -> str:
        """The entry name of model ``name``."""
        return object_name("mx-cache-", name, name)

    async def get(self, name: str) -> ModelRecord | None:
        """The record for ``name``, or None."""
        found = await self._objects.get(self.object_name(name))
        return None if found is None else _model_record(found, name)

    async def try_claim(
        self, name: str, provider: Provider, *, now: float, stale_after: float | None = None
    ) -> bool:
        """Create the entry (409 = lost), or patch a claimable one at its resourceVersion."""
        for _ in range(_ATTEMPTS):
            found = await self._objects.get(self.object_name(name))
            if found is None:
                try:
                    created = await self._create(name, provider, now)
                except ConflictError:
                    continue  # another claimer created it first: judge what it wrote
                await self._patch_status(
                    created, _status(provider, ModelStatus.DOWNLOADING, None, now, created=now)
                )
                return True
            record = _model_record(found, name)
            if not claimable(record, now, stale_after):
                return False
            status = _status(
                provider, ModelStatus.DOWNLOADING, None, now, created=record.created_at
            )
            try:
                await self._objects.patch_status(
                    found["metadata"]["name"],
                    {
                        "metadata": {"resourceVersion": found["metadata"]["resourceVersion"]},
                        "status": status,
                    },
                )
            except (ConflictError, NotFoundError):
                continue  # changed under us: decide again on what is there now
            return True
        raise StoreError(f"claim of {name!r} kept losing races; giving up")

    async def _create(self, name: str, provider: Provider, now: float) -> dict[str, Any]:
        return await self._objects.create(
            {
                "metadata": {
                    "name": self.object_name(name),
                    "labels": {MANAGED_BY: MANAGER},
                    "annotations": {CLAIMED_AT: format_ts(now)},
                },
                "spec": {"modelName": name, "provider": provider.name},
            }
        )

    async def _patch_status(self, found: dict[str, Any], status: dict[str, Any]) -> None:
        """Materialise the status of an entry we just created; cosmetic if it loses."""
        patch = {
            "metadata": {"resourceVersion": found["metadata"]["resourceVersion"]},
            "status": status,
        }
        # Losing means someone moved on already; the annotation-based record stays right.
        with contextlib.suppress(ConflictError, NotFoundError):
            await self._objects.patch_status(found["metadata"]["name"], patch)

    async def set_status(
        self,
        name: str,
        provider: Provider,
        status: ModelStatus,
        message: str | None,
        *,
        now: float,
    ) -> None:
        """Create the entry if missing, then merge-patch its status (createdAt untouched)."""
        for _ in range(_ATTEMPTS):
            if await self._objects.get(self.object_name(name)) is None:
                with contextlib.suppress(ConflictError):
                    await self._create(name, provider, now)
            patch = {"status": _status(provider, status, message, now)}
            try:
                await self._objects.patch_status(self.object_name(name), patch)
            except NotFoundError:
                continue  # deleted in between: create it again
            return
        raise StoreError(f"set_status of {name!r} kept losing races; giving up")

    async def touch(self, name: str, *, now: float) -> bool:
        """Merge-patch status.lastUsedAt; False when there is no entry."""
        try:
            await self._objects.patch_status(
                self.object_name(name), {"status": {"lastUsedAt": format_ts(now)}}
            )
        except NotFoundError:
            return False
        return True

    async def delete(self, name: str) -> bool:
        """Delete the entry; True if it existed."""
        return await self._objects.delete(self.object_name(name))

    async def delete_if(self, name: str, status: ModelStatus, updated_at: float) -> bool:
        """Judge the entry, then delete it at the resourceVersion judged (a 409 = changed)."""
        for _ in range(_ATTEMPTS):
            found = await self._objects.get(self.object_name(name))
            if found is None:
                return False
            record = _model_record(found, name)
            if not unchanged(record, status, updated_at):
                return False
            meta = found["metadata"]
            try:
                return await self._objects.delete(meta["name"], meta["resourceVersion"])
            except ConflictError:
                continue  # written since we judged it: judge again
        raise StoreError(f"delete_if of {name!r} kept losing races; giving up")

    async def list_by_last_used(self, limit: int | None = None) -> list[ModelRecord]:
        """Every entry, least recently used first (ties by name)."""
        records = await self._all()
        records.sort(key=lambda r: (r.last_used_at, r.name))
        return records if limit is None else records[: max(0, limit)]

    async def status_counts(self) -> dict[ModelStatus, int]:
        """Entries per phase."""
        counts: dict[ModelStatus, int] = {}
        for record in await self._all():
            counts[record.status] = counts.get(record.status, 0) + 1
        return counts

    async def _all(self) -> builtins.list[ModelRecord]:
        records = []
        for found in await self._objects.list():
            try:
                records.append(_model_record(found, None))
            except StoreError as exc:
                log.warning("%s; skipped", exc)
        return records

    async def close(self) -> None:
        """Close the API client; idempotent."""
        await self._api.close()


def _status(
    provider: Provider,
    phase: ModelStatus,
    message: str | None,
    now: float,
    *,
    created: float | None = None,
) -> dict[str, Any]:
    status: dict[str, Any] = {
        "phase": phase.name,
        "provider": provider.name,
        "lastUsedAt": format_ts(now),
        "updatedAt": format_ts(now),
        "message": message,  # None deletes the key (JSON merge patch)
    }
    if created is not None:
        status["createdAt"] = format_ts(created)
    return status


def _model_record(found: dict[str, Any], expected: str | None) -> ModelRecord:
    meta = found.get("metadata") or {}
    spec = found.get("spec") or {}
    status = found.get("status") or {}
    try:
        name = spec["modelName"]
        if expected is not None and name != expected:
            raise ConflictError(f"entry {meta.get('name')} holds {name!r}, not {expected!r}")
        # A fresh claim has no status yet: its spec and annotation are the whole record.
        claimed = (meta.get("annotations") or {}).get(CLAIMED_AT) or meta["creationTimestamp"]
        created = status.get("createdAt") or claimed
        updated = status.get("updatedAt") or claimed
        return ModelRecord(
            name=name,
            provider=Provider[status.get("provider") or spec["provider"]],
            status=ModelStatus[status.get("phase") or ModelStatus.DOWNLOADING.name],
            created_at=parse_ts(created),
            last_used_at=parse_ts(status.get("lastUsedAt") or updated),
            updated_at=parse_ts(updated),
            message=status.get("message"),
        )
    except (KeyError, ValueError, TypeError) as exc:
        raise StoreError(f"ModelCacheEntry {meta.get('name')!r} is malformed: {exc!r}") from exc


class KubernetesSourceStore(SourceStore):
    """P2P workers as ModelMetadata objects."""

    def __init__(self, api: KubeApi, namespace: str) -> None:
        self._api = api
        self._objects: KubeObjects = api.objects(MODEL_METADATA, namespace)

    @staticmethod
    def object_name(mx_source_id: str, worker_id: str) -> str:
        """The object name of one worker."""
        return object_name(
            "mx-src-", f"{mx_source_id[:16]}-{worker_id}", f"{mx_source_id}\0{worker_id}"
        )

    async def publish(self, record: SourceRecord) -> None:
        """Create, or replace (spec and status in one PUT) at the current resourceVersion."""
        name = self.object_name(record.mx_source_id, record.worker_id)
        body = _worker_object(name, record)
        for _ in range(_ATTEMPTS):
            found = await self._objects.get(name)
            try:
                if found is None:
                    await self._objects.create(body)
                else:
                    version = found["metadata"]["resourceVersion"]
                    replaced = {
                        **body,
                        "metadata": {**body["metadata"], "resourceVersion": version},
                    }
                    await self._objects.replace(name, replaced)
            except (ConflictError, NotFoundError):
                continue
            return
        raise StoreError(f"publish of worker {record.worker_id!r} kept losing races; giving up")

    async def list(self, query: SourceQuery) -> list[SourceRecord]:
        """Selected by label (source id, rank), filtered and ordered here."""
        found = [r for r in await self._load(query) if query.matches(r)]
        found.sort(key=source_sort_key)
        return found if query.limit is None else found[: max(0, query.limit)]

    async def _load(self, query: SourceQuery) -> builtins.list[SourceRecord]:
        selector = [f"{MANAGED_BY}={MANAGER}"]
        if query.mx_source_id is not None:
            selector.append(f"{SOURCE_LABEL}={_label_value(query.mx_source_id)}")
        if query.worker_rank is not None:
            selector.append(f"{RANK_LABEL}={query.worker_rank}")
        return [record for _, record in await self._judged(",".join(selector))]

    async def _judged(
        self, selector: str = f"{MANAGED_BY}={MANAGER}"
    ) -> builtins.list[tuple[dict[str, Any], SourceRecord]]:
        """(object, record) pairs; a malformed object is logged and skipped, not fatal."""
        pairs = []
        for found in await self._objects.list(selector):
            try:
                pairs.append((found, _source_record(found)))
            except StoreError as exc:
                log.warning("%s; skipped", exc)
        return pairs

    async def get(self, mx_source_id: str, worker_id: str) -> SourceRecord | None:
        """One worker, or None."""
        found = await self._objects.get(self.object_name(mx_source_id, worker_id))
        if found is None:
            return None
        record = _source_record(found)
        if (record.mx_source_id, record.worker_id) != (mx_source_id, worker_id):
            return None  # a name-hash collision: not this worker
        return record

    async def update_status(
        self,
        mx_source_id: str,
        worker_id: str,
        status: SourceStatus,
        source_load: float | None,
        *,
        now: float,
    ) -> bool:
        """Merge-patch status (update-only: 404 means no such worker)."""
        patch_status = _worker_status(status, now)
        if source_load is not None:
            patch_status["sourceLoad"] = float(source_load)
        try:
            await self._objects.patch(
                self.object_name(mx_source_id, worker_id), {"status": patch_status}
            )
        except NotFoundError:
            return False
        return True

    async def mark_stale(self, heartbeat_timeout: float, *, now: float) -> int:
        """STALE at the resourceVersion that was judged silent; a heartbeat in between wins."""
        cutoff = now - heartbeat_timeout
        marked = 0
        for found, record in await self._judged():
            if record.status == SourceStatus.STALE or record.updated_at >= cutoff:
                continue
            status = _worker_status(SourceStatus.STALE, record.updated_at)
            patch = {
                "metadata": {"resourceVersion": found["metadata"]["resourceVersion"]},
                "status": status,
            }
            try:
                await self._objects.patch(found["metadata"]["name"], patch)
            except (ConflictError, NotFoundError):
                continue
            marked += 1
        return marked

    async def gc(self, stale_age: float, *, now: float) -> int:
        """Delete old STALE workers, each only at the resourceVersion judged."""
        cutoff = now - stale_age
        deleted = 0
        for found, record in await self._judged():
            if record.status != SourceStatus.STALE or record.updated_at >= cutoff:
                continue
            meta = found["metadata"]
            try:
                deleted += await self._objects.delete(meta["name"], meta["resourceVersion"])
            except ConflictError:
                continue  # it heart-beat meanwhile
        return deleted

    async def close(self) -> None:
        """Close the API client; idempotent."""
        await self._api.close()


def _worker_status(phase: SourceStatus, updated_at: float) -> dict[str, Any]:
    stamp = format_ts(updated_at)
    ready = {
        "type": "Ready",
        "status": "True" if phase == SourceStatus.READY else "False",
        "reason": phase.name.title(),
        "message": f"worker is {phase.name}",
        "lastTransitionTime": stamp[:19] + "Z",
    }
    return {"phase": phase.name, "updatedAt": stamp, "conditions": [ready]}


def _worker_object(name: str, record: SourceRecord) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "mxSourceId": record.mx_source_id,
        "workerId": record.worker_id,
        "workerRank": record.worker_rank,
        "modelName": record.identity.model_name,
        "identity": record.identity.to_dict(),
        "workerMetadata": base64.b64encode(record.metadata).decode(),
        "accelerator": record.accelerator,
        "topology": dict(record.topology),
        "podName": record.pod_name,
        "podUid": record.pod_uid,
        "podNamespace": record.pod_namespace,
    }
    if record.training_step is not None:
        spec["trainingStep"] = record.training_step
    if record.layout_signature is not None:
        spec["layoutSignature"] = record.layout_signature
    status = _worker_status(record.status, record.updated_at)
    if record.source_load is not None:
        status["sourceLoad"] = float(record.source_load)
    labels = {
        MANAGED_BY: MANAGER,
        SOURCE_LABEL: _label_value(record.mx_source_id),
        RANK_LABEL: str(record.worker_rank),
    }
    return {"metadata": {"name": name, "labels": labels}, "spec": spec, "status": status}


def _source_record(found: dict[str, Any]) -> SourceRecord:
    meta, spec, status = (
        found.get("metadata") or {},
        found.get("spec") or {},
        found.get("status") or {},
    )
    try:
        load, step = status.get("sourceLoad"), spec.get("trainingStep")
        return SourceRecord(
            mx_source_id=spec["mxSourceId"],
            worker_id=spec["workerId"],
            identity=SourceIdentity.from_dict(dict(spec.get("identity") or {})),
            worker_rank=int(spec["workerRank"]),
            status=SourceStatus[status.get("phase") or "UNKNOWN"],
            updated_at=parse_ts(status["updatedAt"]),
            metadata=base64.b64decode(spec.get("workerMetadata") or ""),
            accelerator=spec.get("accelerator") or "",
            topology=dict(spec.get("topology") or {}),
            source_load=None if load is None else float(load),
            training_step=None if step is None else int(step),
            layout_signature=spec.get("layoutSignature"),
            pod_name=spec.get("podName") or "",
            pod_uid=spec.get("podUid") or "",
            pod_namespace=spec.get("podNamespace") or "",
        )
    except (KeyError, ValueError, TypeError) as exc:
        raise StoreError(f"ModelMetadata {meta.get('name')!r} is malformed: {exc!r}") from exc


async def create_stores(settings: RegistrySettings) -> Stores:
    """Both stores in ``settings.kubernetes_namespace`` (in-cluster or kubeconfig credentials)."""
    namespace = settings.kubernetes_namespace
    return Stores(
        models=KubernetesModelStore(KubeApi(), namespace),
        sources=KubernetesSourceStore(KubeApi(), namespace),
    )
