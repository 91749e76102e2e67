"""The store operations one kind (Model, LoRAAdapter, ModelCatalog) shares, on its custom resource.

Writes are single JSON patches: the spec (or status) and, for a conditional write, the
caller's resourceVersion, so the apiserver does the compare-and-swap and there is no
read-modify-write window. Status goes through the status subresource.
"""

from __future__ import annotations

from typing import Generic

import pydantic

from flexinfer_common.errors import ConflictError, NotFoundError
from flexinfer_controller.adapters.kube.convert import (
    Api,
    check_version,
    dump,
    from_object,
    to_body,
)
from flexinfer_controller.adapters.kube.objects import CustomObjects, JsonPatch, version_guard


class KindStore(Generic[Api]):
    """create/get/list/replace/update_status/delete of one kind."""

    def __init__(self, objects: CustomObjects, kind: type[Api], what: str) -> None:
        self.objects = objects
        self._kind: type[Api] = kind
        self._what = what

    async def create(self, obj: Api, guard_status: bool = True) -> Api:
        """POST the object; a non-default status follows through the status subresource.

        ``guard_status=False`` writes that status whatever was written since the POST: for a
        kind whose other status writer writes the same status (LoRAAdapters' informer).
        """
        key = obj.key
        try:
            found = await self.objects.create(obj.metadata.namespace, to_body(obj))
        except ConflictError as exc:
            raise ConflictError(f"{self._what} {key} already exists") from exc
        created = from_object(self._kind, found)
        if obj.status == type(obj.status)():
            return created
        meta = created.metadata
        version = meta.resource_version if guard_status else None
        return await self.update_status(meta.namespace, meta.name, obj.status, version)

    async def get(self, namespace: str, name: str) -> Api:
        """The object, or NotFoundError."""
        try:
            found = await self.objects.get(namespace, name)
        except NotFoundError as exc:
            raise NotFoundError(f"{self._what} {namespace}/{name} not found") from exc
        return from_object(self._kind, found)

    async def list(self, namespace: str | None) -> list[Api]:
        """Every object (of one namespace), ordered by key."""
        items, _ = await self.objects.list(namespace)
        return sorted((from_object(self._kind, o) for o in items), key=lambda o: o.key)

    async def replace(self, obj: Api) -> Api:
        """Labels, annotations, finalizers and spec in one patch; generation is the apiserver's."""
        meta = obj.metadata
        ops: JsonPatch = [
            {"op": "add", "path": "/metadata/labels", "value": meta.labels},
            {"op": "add", "path": "/metadata/annotations", "value": meta.annotations},
            # The SQL store's replace writes finalizers too (the reconcile's cleanup one).
            {"op": "add", "path": "/metadata/finalizers", "value": meta.finalizers},
            {"op": "add", "path": "/spec", "value": dump(obj.spec)},
        ]
        return await self._write(meta.namespace, meta.name, meta.resource_version, ops, False)

    async def update_status(
        self, namespace: str, name: str, status: pydantic.BaseModel, resource_version: str | None
    ) -> Api:
        """The whole status, through the status subresource."""
        ops: JsonPatch = [{"op": "add", "path": "/status", "value": dump(status)}]
        return await self._write(namespace, name, resource_version, ops, True)

    async def delete(self, namespace: str, name: str) -> None:
        """DELETE; with finalizers the object stays, marked with a deletionTimestamp."""
        try:
            await self.objects.delete(namespace, name)
        except NotFoundError as exc:
            raise NotFoundError(f"{self._what} {namespace}/{name} not found") from exc

    async def _write(
        self, namespace: str, name: str, expected: str | None, ops: JsonPatch, status: bool
    ) -> Api:
        key = f"{namespace}/{name}"
        check_version(self._what, key, expected)
        ops = [*version_guard(expected), *ops]
        patch = self.objects.json_patch_status if status else self.objects.json_patch
        try:
            found = await patch(namespace, name, ops)
        except NotFoundError as exc:
            raise NotFoundError(f"{self._what} {key} not found") from exc
        except ConflictError as exc:
            raise ConflictError(
                f"{self._what} {key} changed: resourceVersion {expected} is stale;"
                " read it again and retry"
            ) from exc
        return from_object(self._kind, found)
