"""Built-in objects (Services, Deployments, Jobs...) by API group and resource, as dicts.

The kubernetes runtime's plan names each call as (verb, group, resource, namespace, name);
this executes it on the REST path of that resource, through the official client's
``ApiClient.call_api``, so one small class serves every kind the renderers make rather
than one typed API class per group. Every group the controller writes is at ``v1``.
"""

from __future__ import annotations

from typing import Any, cast
from urllib.parse import quote

from flexinfer_common.kube.client import MERGE_PATCH, KubeClient, Obj

VERSION = "v1"
_METHODS = {"get": "GET", "create": "POST", "update": "PUT", "patch": "PATCH", "delete": "DELETE"}


def collection_path(group: str, resource: str, namespace: str) -> str:
    """``/api/v1/namespaces/NS/RES`` or ``/apis/GROUP/v1/namespaces/NS/RES``."""
    prefix = f"/apis/{group}/{VERSION}" if group else f"/api/{VERSION}"
    return f"{prefix}/namespaces/{quote(namespace, safe='')}/{resource}"


class Workloads:
    """get/create/update/patch/delete of namespaced built-in objects."""

    def __init__(self, client: KubeClient) -> None:
        self._client = client

    async def execute(
        self,
        verb: str,
        where: tuple[str, str, str],
        name: str | None = None,
        body: Obj | None = None,
    ) -> Obj:
        """One call; ``where`` is (group, resource, namespace). Errors as ``api_errors``."""
        group, resource, namespace = where
        path = collection_path(group, resource, namespace)
        if name is not None:
            path += f"/{quote(name, safe='')}"
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = MERGE_PATCH if verb == "patch" else "application/json"
        api = self._client.api_client
        found = await self._client.call(
            f"{verb} {resource}",
            api.call_api,
            path,
            _METHODS[verb],
            header_params=headers,
            body=body,
            response_types_map={200: "object", 201: "object", 202: "object"},
            auth_settings=["BearerToken"],
            _return_http_data_only=True,
        )
        return cast(Obj, found or {})

    async def get(self, where: tuple[str, str, str], name: str) -> Obj:
        """The live object; NotFoundError when absent."""
        return await self.execute("get", where, name)

    async def merge_patch(
        self, where: tuple[str, str, str], name: str, patch: dict[str, Any]
    ) -> Obj:
        """A JSON merge patch of the object."""
        return await self.execute("patch", where, name, patch)
