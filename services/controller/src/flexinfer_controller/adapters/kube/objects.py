"""One custom resource's objects as plain dicts: create, get, list, patch, delete, watch."""

from __future__ import annotations

import functools
from typing import Any, cast

from flexinfer_common.kube.client import (
    JSON_PATCH,
    KubeClient,
    Obj,
    Resource,
    WatchStream,
    watch_kwargs,
)

JsonPatch = list[dict[str, Any]]


def version_guard(resource_version: str | None) -> JsonPatch:
    """JSON patch ops making a write conditional on ``resource_version`` (409 when stale).

    The patched object carries this resourceVersion, and the apiserver refuses an update
    whose resourceVersion is not the stored one: the usual compare-and-swap by patch.
    """
    if resource_version is None:
        return []
    return [{"op": "replace", "path": "/metadata/resourceVersion", "value": resource_version}]


class CustomObjects:
    """The objects of one resource, in any namespace."""

    def __init__(self, client: KubeClient, resource: Resource) -> None:
        self.client = client
        self.resource = resource

    def _args(self, namespace: str) -> tuple[str, str, str, str]:
        r = self.resource
        return (r.group, r.version, namespace, r.plural)

    async def create(self, namespace: str, body: Obj) -> Obj:
        """POST; ConflictError when the name is taken."""
        body = {"apiVersion": self.resource.api_version, "kind": self.resource.kind, **body}
        fn = self.client.custom.create_namespaced_custom_object
        what = f"create {self.resource.plural}"
        return cast(Obj, await self.client.call(what, fn, *self._args(namespace), body))

    async def get(self, namespace: str, name: str) -> Obj:
        """GET; NotFoundError when absent."""
        fn = self.client.custom.get_namespaced_custom_object
        what = f"get {self.resource.plural}"
        return cast(Obj, await self.client.call(what, fn, *self._args(namespace), name))

    async def list(self, namespace: str | None = None) -> tuple[list[Obj], str]:
        """Every object (of one namespace) and the list's resourceVersion."""
        r, custom = self.resource, self.client.custom
        what = f"list {r.plural}"
        if namespace is None:
            found = await self.client.call(
                what, custom.list_cluster_custom_object, r.group, r.version, r.plural
            )
        else:
            found = await self.client.call(
                what, custom.list_namespaced_custom_object, *self._args(namespace)
            )
        items = cast(list[Obj], found.get("items") or [])
        return items, str(found["metadata"]["resourceVersion"])

    async def json_patch(self, namespace: str, name: str, ops: JsonPatch) -> Obj:
        """A JSON patch of the main resource (status is ignored there)."""
        fn = self.client.custom.patch_namespaced_custom_object
        what = f"patch {self.resource.plural}"
        args = (*self._args(namespace), name, ops)
        return cast(Obj, await self.client.call(what, fn, *args, _content_type=JSON_PATCH))

    async def json_patch_status(self, namespace: str, name: str, ops: JsonPatch) -> Obj:
        """A JSON patch through the status subresource (only status changes)."""
        fn = self.client.custom.patch_namespaced_custom_object_status
        what = f"patch {self.resource.plural}/status"
        args = (*self._args(namespace), name, ops)
        return cast(Obj, await self.client.call(what, fn, *args, _content_type=JSON_PATCH))

    async def delete(self, namespace: str, name: str) -> Obj:
        """DELETE (finalizers may keep the object, marked for deletion); NotFoundError if absent."""
        fn = self.client.custom.delete_namespaced_custom_object
        what = f"delete {self.resource.plural}"
        return cast(Obj, await self.client.call(what, fn, *self._args(namespace), name))


class CustomListWatch:
    """List and watch of one custom resource (where an ``Informer`` follows it)."""

    def __init__(self, client: KubeClient, resource: Resource) -> None:
        self._client = client
        self._objects = CustomObjects(client, resource)
        self._resource = resource
        self.kind = resource.kind
        self.plural = resource.plural

    async def list(self, namespace: str | None) -> tuple[list[Obj], str]:
        """The objects and the list's resourceVersion."""
        return await self._objects.list(namespace)

    def watch(self, namespace: str | None, resource_version: str, timeout_s: int) -> WatchStream:
        """A watch of the custom resource after ``resource_version``, with bookmarks."""
        r, custom = self._resource, self._client.custom
        kwargs = watch_kwargs(resource_version, timeout_s)
        if namespace is None:
            opener = functools.partial(
                custom.list_cluster_custom_object,
                r.group,
                r.version,
                r.plural,
                watch=True,
                **kwargs,
            )
        else:
            opener = functools.partial(
                custom.list_namespaced_custom_object,
                r.group,
                r.version,
                namespace,
                r.plural,
                watch=True,
                **kwargs,
            )
        return WatchStream(opener, f"watch {r.plural}")
