"""Namespaced custom objects of the registry's kinds, over the shared Kubernetes client.

The only module of the registry that imports ``kubernetes`` (import-linter enforces it).
Objects are plain dicts. Calls run in worker threads through
``flexinfer_common.kube.client.KubeClient``, which maps the client's errors: 404
NotFoundError, 409 ConflictError (name taken, or a ``resourceVersion`` precondition
failed), 400/422 ApiRejectedError (an InvalidSpecError), anything else StoreError.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

from kubernetes import client as kube_client

from flexinfer_common.errors import NotFoundError
from flexinfer_common.kube.client import MERGE_PATCH, KubeClient, Obj, Resource

T = TypeVar("T")
POOL_SIZE = 32
"""HTTP connections kept per client: claims arrive in bursts of concurrent calls."""


class KubeApi:
    """One API client (connection pool); hands out per-resource views."""

    def __init__(self, host: str | None = None, token: str | None = None) -> None:
        self._client = KubeClient(host, token, pool_size=POOL_SIZE)

    def objects(self, resource: Resource, namespace: str) -> KubeObjects:
        """The objects of ``resource`` in ``namespace``."""
        return KubeObjects(self._client, resource, namespace)

    async def close(self) -> None:
        """Close the connection pool; idempotent."""
        await self._client.close()


class KubeObjects:
    """create/get/list/replace/patch/patch_status/delete of one resource in one namespace."""

    def __init__(self, client: KubeClient, resource: Resource, namespace: str) -> None:
        self._client = client
        self.resource = resource
        self.namespace = namespace

    async def _call(self, what: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        r = self.resource
        where = (r.group, r.version, self.namespace, r.plural)
        return await self._client.call(f"{what} {r.plural}", fn, *where, *args, **kwargs)

    def _typed(self, body: Obj) -> Obj:
        return {"apiVersion": self.resource.api_version, "kind": self.resource.kind, **body}

    async def create(self, body: Obj) -> Obj:
        """POST a new object; ConflictError when the name is taken."""
        fn = self._client.custom.create_namespaced_custom_object
        return cast(Obj, await self._call("create", fn, self._typed(body)))

    async def get(self, name: str) -> Obj | None:
        """The object, or None."""
        try:
            found = await self._call("get", self._client.custom.get_namespaced_custom_object, name)
        except NotFoundError:
            return None
        return cast(Obj, found)

    async def list(self, label_selector: str | None = None) -> list[Obj]:
        """Every object (matching ``label_selector``)."""
        kwargs = {} if label_selector is None else {"label_selector": label_selector}
        fn = self._client.custom.list_namespaced_custom_object
        found = await self._call("list", fn, **kwargs)
        return cast(list[Obj], found.get("items") or [])

    async def replace(self, name: str, body: Obj) -> Obj:
        """PUT the whole object; with metadata.resourceVersion set it is compare-and-swap."""
        fn = self._client.custom.replace_namespaced_custom_object
        return cast(Obj, await self._call("replace", fn, name, self._typed(body)))

    async def patch(self, name: str, patch: Obj) -> Obj:
        """JSON merge patch of the object (a resourceVersion in it is a precondition)."""
        fn = self._client.custom.patch_namespaced_custom_object
        return cast(Obj, await self._call("patch", fn, name, patch, _content_type=MERGE_PATCH))

    async def patch_status(self, name: str, patch: Obj) -> Obj:
        """JSON merge patch through the status subresource."""
        fn = self._client.custom.patch_namespaced_custom_object_status
        found = await self._call("patch status", fn, name, patch, _content_type=MERGE_PATCH)
        return cast(Obj, found)

    async def delete(self, name: str, resource_version: str | None = None) -> bool:
        """Delete (only at ``resource_version`` when given); False if it did not exist."""
        body = None
        if resource_version is not None:
            body = kube_client.V1DeleteOptions(
                preconditions=kube_client.V1Preconditions(resource_version=resource_version)
            )
        fn = self._client.custom.delete_namespaced_custom_object
        try:
            await self._call("delete", fn, name, body=body)
        except NotFoundError:
            return False
        return True
