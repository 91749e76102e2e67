"""API objects (pydantic) to and from the dicts the apiserver stores."""

from __future__ import annotations

from typing import Any, TypeVar

import pydantic

from flexinfer_common.api import LoRAAdapter, Model, ModelCatalog
from flexinfer_common.errors import ConflictError, StoreError

Obj = dict[str, Any]
Api = TypeVar("Api", Model, LoRAAdapter, ModelCatalog)
_META = (
    "name",
    "namespace",
    "labels",
    "annotations",
    "uid",
    "generation",
    "resourceVersion",
    "creationTimestamp",
    "deletionTimestamp",
    "finalizers",
)
"""The ObjectMeta fields the API types carry (the rest, like managedFields, stays behind)."""


def dump(value: pydantic.BaseModel) -> Obj:
    """The wire form: camelCase, no nulls (the CRD schemas have no nullable fields)."""
    return value.model_dump(mode="json", by_alias=True, exclude_none=True)


def to_body(obj: Model | LoRAAdapter | ModelCatalog) -> Obj:
    """The body of a create: metadata the client owns, and the spec."""
    meta = obj.metadata
    body_meta: Obj = {"name": meta.name, "namespace": meta.namespace}
    for field, value in (
        ("labels", meta.labels),
        ("annotations", meta.annotations),
        ("finalizers", meta.finalizers),
    ):
        if value:
            body_meta[field] = value
    return {"metadata": body_meta, "spec": dump(obj.spec)}


def api_body(found: Obj) -> Obj:
    """A stored dict as an API type reads it: the metadata it declares, spec and status."""
    meta = {k: v for k, v in (found.get("metadata") or {}).items() if k in _META}
    body = {"metadata": meta, "spec": found.get("spec") or {}}
    if found.get("status") is not None:
        body["status"] = found["status"]
    return body


def from_object(kind: type[Api], found: Obj) -> Api:
    """The API object of a stored dict; StoreError when it does not validate."""
    body = api_body(found)
    try:
        return kind.model_validate(body)
    except pydantic.ValidationError as exc:
        meta = body["metadata"]
        name = f"{meta.get('namespace')}/{meta.get('name')}"
        raise StoreError(f"stored {kind.__name__} {name} is invalid: {exc}") from exc


def check_version(what: str, key: str, resource_version: str | None) -> None:
    """ConflictError for a resourceVersion the apiserver cannot have issued.

    The apiserver parses resourceVersions as unsigned integers and fails such a write
    with an internal error; the store interface calls it a conflict, as the SQL store does.
    """
    if resource_version is not None and not resource_version.isdigit():
        raise ConflictError(
            f"{what} {key}: resourceVersion {resource_version!r} is not one we issued"
        )
