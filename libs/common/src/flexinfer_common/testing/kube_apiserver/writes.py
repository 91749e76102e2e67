"""Create, update (PUT, PATCH, /status) and delete with the apiserver's semantics.

Call every function with ``store.cond`` held. Rules kept from the real apiserver:
resourceVersion preconditions (409), unconditional PUTs refused for custom resources
(422), the status subresource (status ignored on create and on main-resource writes,
everything but status ignored on /status), generation bumped when anything outside
metadata and status changes, no-op writes not bumping the resourceVersion, finalizers
holding a deleted object (deletionTimestamp set) until the last one is removed, and no new
finalizers on an object being deleted. There is no garbage collector: propagationPolicy
is accepted and ignored, and owner references do not cascade.
"""

from __future__ import annotations

import copy
import secrets
import string
import uuid
from typing import Any

from flexinfer_common.testing.kube_apiserver.errors import ApiError, conflict, invalid, not_found
from flexinfer_common.testing.kube_apiserver.objects import Key, ObjectStore, key_of, now_rfc3339
from flexinfer_common.testing.kube_apiserver.types import ResourceType

Obj = dict[str, Any]
USER_METADATA = ("labels", "annotations", "finalizers", "ownerReferences")
"""The metadata a client writes; the rest is the server's."""
_SYSTEM = ("apiVersion", "kind", "metadata", "status")


def _content(rt: ResourceType, obj: Obj) -> Obj:
    """What metadata.generation tracks: everything but metadata (and status, if a subresource)."""
    skip = ("metadata", "status") if rt.status_subresource else ("metadata",)
    return {k: v for k, v in obj.items() if k not in skip and k not in ("apiVersion", "kind")}


def _admit(rt: ResourceType, obj: Obj, old: Obj | None, *, main: bool) -> Obj:
    if main and rt.defaulter is not None:
        rt.defaulter(obj, old)
    if rt.schema is not None:
        return rt.schema.admit(obj, old)
    return obj


def _new_name(meta: Obj) -> str:
    name = meta.get("name")
    if name:
        return str(name)
    prefix = meta.get("generateName")
    if not prefix:
        raise ApiError(422, "metadata.name: Required value: name or generateName is required")
    alphabet = string.ascii_lowercase + string.digits
    return str(prefix) + "".join(secrets.choice(alphabet) for _ in range(5))


def create(store: ObjectStore, rt: ResourceType, namespace: str | None, body: Obj) -> Obj:
    """POST: a new object (409 AlreadyExists when the name is taken)."""
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    obj = copy.deepcopy(body)
    obj["apiVersion"], obj["kind"] = rt.api_version, rt.kind
    given = obj.get("metadata") or {}
    name = _new_name(given)
    if rt.namespaced and given.get("namespace") not in (None, namespace):
        raise ApiError(400, "the namespace of the provided object does not match the request")
    key = key_of(rt, namespace if rt.namespaced else None, name)
    if key in store.objects:
        raise ApiError(409, f'{rt.qualified} "{name}" already exists', "AlreadyExists")
    meta: Obj = {k: copy.deepcopy(given[k]) for k in USER_METADATA if given.get(k)}
    meta.update(name=name, uid=str(uuid.uuid4()), creationTimestamp=now_rfc3339())
    if given.get("generateName"):
        meta["generateName"] = given["generateName"]
    if rt.namespaced:
        meta["namespace"] = namespace
    if rt.tracks_generation:
        meta["generation"] = 1
    obj["metadata"] = meta
    if rt.status_subresource:
        obj.pop("status", None)
        if rt.initial_status is not None:
            obj["status"] = copy.deepcopy(rt.initial_status)
    obj = _admit(rt, obj, None, main=True)
    meta["resourceVersion"] = store.next_rv()
    store.objects[key] = obj
    store.emit("ADDED", rt, obj, None)
    return copy.deepcopy(obj)


def _precondition(rt: ResourceType, current: Obj, wanted: Obj, *, put: bool) -> None:
    name = current["metadata"]["name"]
    version = (wanted.get("metadata") or {}).get("resourceVersion")
    if version:
        if str(version) != current["metadata"]["resourceVersion"]:
            raise conflict(rt.qualified, name)
    elif put and not rt.unconditional_update:
        detail = "metadata.resourceVersion: Invalid value: 0: must be specified for an update"
        raise invalid(rt.kind, name, detail)


def _merged(rt: ResourceType, current: Obj, wanted: Obj, *, status_only: bool) -> Obj:
    """The candidate object: ``wanted`` on the fields this endpoint may change, else current."""
    if status_only:
        new = copy.deepcopy(current)
        new.pop("status", None)
        if wanted.get("status") is not None:
            new["status"] = copy.deepcopy(wanted["status"])
        return new
    new = {k: copy.deepcopy(v) for k, v in wanted.items() if k not in _SYSTEM}
    new["apiVersion"], new["kind"] = rt.api_version, rt.kind
    meta = {k: v for k, v in copy.deepcopy(current["metadata"]).items() if k not in USER_METADATA}
    given = wanted.get("metadata") or {}
    meta.update({k: copy.deepcopy(given[k]) for k in USER_METADATA if given.get(k)})
    new["metadata"] = meta
    source = current if rt.status_subresource else wanted
    if source.get("status") is not None:
        new["status"] = copy.deepcopy(source["status"])
    return new


def _check_finalizers(rt: ResourceType, current: Obj, new: Obj) -> None:
    if not current["metadata"].get("deletionTimestamp"):
        return
    added = set(new["metadata"].get("finalizers") or []) - set(
        current["metadata"].get("finalizers") or []
    )
    if added:
        raise invalid(
            rt.kind,
            current["metadata"]["name"],
            "metadata.finalizers: Forbidden: no new finalizers can be added if the object is"
            " being deleted",
        )


def update(
    store: ObjectStore, rt: ResourceType, key: Key, wanted: Obj, *, status_only: bool, put: bool
) -> Obj:
    """PUT or the result of a PATCH, on the main resource or on /status."""
    current = store.get(key)
    if current is None:
        raise not_found(rt.qualified, key[3])
    if not isinstance(wanted, dict):
        raise ApiError(400, "the request body must be a JSON object")
    body_name = (wanted.get("metadata") or {}).get("name")
    if body_name not in (None, key[3]):
        raise ApiError(400, f"the name of the object ({body_name}) does not match the URL")
    _precondition(rt, current, wanted, put=put)
    new = _merged(rt, current, wanted, status_only=status_only)
    if not status_only:
        _check_finalizers(rt, current, new)
    new = _admit(rt, new, current, main=not status_only)
    if rt.tracks_generation and _content(rt, new) != _content(rt, current):
        new["metadata"]["generation"] = int(current["metadata"].get("generation") or 0) + 1
    if new == current:
        return copy.deepcopy(current)  # a no-op write keeps its resourceVersion
    new["metadata"]["resourceVersion"] = store.next_rv()
    if new["metadata"].get("deletionTimestamp") and not new["metadata"].get("finalizers"):
        del store.objects[key]
        store.emit("DELETED", rt, new, current)
        return copy.deepcopy(new)
    store.objects[key] = new
    store.emit("MODIFIED", rt, new, current)
    return copy.deepcopy(new)


def _delete_preconditions(rt: ResourceType, current: Obj, options: Obj) -> None:
    pre = options.get("preconditions") or {}
    meta = current["metadata"]
    for field, actual in (("resourceVersion", meta["resourceVersion"]), ("uid", meta["uid"])):
        wanted = pre.get(field)
        if wanted is not None and wanted != actual:
            raise ApiError(
                409,
                f"Precondition failed: {field} in precondition: {wanted}, {field} in object"
                f" meta: {actual}",
                "Conflict",
            )


def delete(store: ObjectStore, rt: ResourceType, key: Key, options: Obj) -> tuple[int, Obj]:
    """DELETE: at once without finalizers (200), else mark deletionTimestamp (202)."""
    current = store.get(key)
    if current is None:
        raise not_found(rt.qualified, key[3])
    _delete_preconditions(rt, current, options or {})
    if current["metadata"].get("finalizers"):
        if current["metadata"].get("deletionTimestamp"):
            return 202, copy.deepcopy(current)
        new = copy.deepcopy(current)
        new["metadata"].update(
            deletionTimestamp=now_rfc3339(),
            deletionGracePeriodSeconds=0,
            resourceVersion=store.next_rv(),
        )
        store.objects[key] = new
        store.emit("MODIFIED", rt, new, current)
        return 202, copy.deepcopy(new)
    gone = copy.deepcopy(current)
    gone["metadata"]["resourceVersion"] = store.next_rv()
    del store.objects[key]
    if rt.plural == "pods":
        store.logs.pop((key[2], key[3]), None)
    store.emit("DELETED", rt, gone, current)
    if rt.returns_deleted_object:
        return 200, gone
    details = {"name": key[3], "kind": rt.plural, "uid": current["metadata"]["uid"]}
    if rt.group:
        details["group"] = rt.group
    status = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}
    return 200, {**status, "details": details}
