"""Namespaced custom objects through the official ``kubernetes`` client.

The only module of the registry that imports ``kubernetes`` (import-linter enforces it).
Objects are plain dicts. The sync client runs in worker threads; its errors become
flexinfer_common.errors: 404 NotFoundError, 409 ConflictError (name taken, or a
``resourceVersion`` precondition failed), 422 InvalidSpecError, anything else StoreError.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import anyio.to_thread
import urllib3.exceptions
from kubernetes import client as kube_client
from kubernetes import config as kube_config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from flexinfer_common.errors import (
    ConfigError,
    ConflictError,
    InvalidSpecError,
    NotFoundError,
    StoreError,
)

T = TypeVar("T")
MERGE_PATCH = "application/merge-patch+json"
REQUEST_TIMEOUT = (5.0, 30.0)
"""(connect, read) seconds per API call: an unreachable apiserver fails fast."""
POOL_SIZE = 32
"""HTTP connections kept per client: claims arrive in bursts of concurrent calls."""


@dataclass(frozen=True)
class Resource:
    """A custom resource type: where its REST paths live and what its objects are called."""

    group: str
    version: str
    plural: str
    kind: str

    @property
    def api_version(self) -> str:
        """``group/version``, as objects carry it."""
        return f"{self.group}/{self.version}"


def configuration(host: str | None = None, token: str | None = None) -> Any:
    """Client settings: ``host`` if given, else in-cluster, else $KUBECONFIG or ~/.kube/config."""
    if host is not None:
        config = kube_client.Configuration(host=host)
        if token:
            config.api_key = {"authorization": f"Bearer {token}"}
    else:
        config = kube_client.Configuration()
        try:
            kube_config.load_incluster_config(client_configuration=config)
        except ConfigException:
            try:
                # KUBECONFIG read now, not at import (the client's default is frozen then).
                path = os.environ.get("KUBECONFIG") or None
                kube_config.load_kube_config(config_file=path, client_configuration=config)
            except (ConfigException, OSError) as exc:
                raise ConfigError(f"no Kubernetes configuration found: {exc}") from exc
    config.connection_pool_maxsize = POOL_SIZE
    config.retries = 1
    return config


class KubeApi:
    """One API client (connection pool); hands out per-resource views."""

    def __init__(self, host: str | None = None, token: str | None = None) -> None:
        self._api_client = kube_client.ApiClient(configuration(host, token))
        self._custom = kube_client.CustomObjectsApi(self._api_client)
        self._closed = False

    def objects(self, resource: Resource, namespace: str) -> KubeObjects:
        """The objects of ``resource`` in ``namespace``."""
        return KubeObjects(self._custom, resource, namespace)

    async def close(self) -> None:
        """Close the connection pool; idempotent."""
        if not self._closed:
            self._closed = True
            await anyio.to_thread.run_sync(self._close)

    def _close(self) -> None:
        self._api_client.close()
        # ApiClient.close only stops its thread pool; the sockets live in urllib3's pool.
        self._api_client.rest_client.pool_manager.clear()


@contextmanager
def _api_errors(what: str) -> Iterator[None]:
    try:
        yield
    except ApiException as exc:
        message = f"kubernetes {what}: {exc.status} {_reason(exc)}"
        if exc.status == 404:
            raise NotFoundError(message) from exc
        if exc.status == 409:
            raise ConflictError(message) from exc
        if exc.status == 422:
            raise InvalidSpecError(message) from exc
        raise StoreError(message) from exc
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise StoreError(f"kubernetes {what}: apiserver unreachable: {exc}") from exc


def _reason(exc: ApiException) -> str:
    try:
        return str(json.loads(exc.body or "{}").get("message") or exc.reason)
    except ValueError:
        return str(exc.reason)


class KubeObjects:
    """create/get/list/replace/patch/patch_status/delete of one resource in one namespace."""

    def __init__(self, api: Any, resource: Resource, namespace: str) -> None:
        self._api = api
        self.resource = resource
        self.namespace = namespace

    async def _call(self, what: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        r = self.resource
        call = functools.partial(
            fn,
            r.group,
            r.version,
            self.namespace,
            r.plural,
            *args,
            _request_timeout=REQUEST_TIMEOUT,
            **kwargs,
        )

        def run() -> T:
            with _api_errors(f"{what} {r.plural}"):
                return call()

        return await anyio.to_thread.run_sync(run)

    async def create(self, body: dict[str, Any]) -> dict[str, Any]:
        """POST a new object; ConflictError when the name is taken."""
        body = {"apiVersion": self.resource.api_version, "kind": self.resource.kind, **body}
        return cast(
            dict[str, Any],
            await self._call("create", self._api.create_namespaced_custom_object, body),
        )

    async def get(self, name: str) -> dict[str, Any] | None:
        """The object, or None."""
        try:
            found = await self._call("get", self._api.get_namespaced_custom_object, name)
        except NotFoundError:
            return None
        return cast(dict[str, Any], found)

    async def list(self, label_selector: str | None = None) -> list[dict[str, Any]]:
        """Every object (matching ``label_selector``)."""
        kwargs = {} if label_selector is None else {"label_selector": label_selector}
        found = await self._call("list", self._api.list_namespaced_custom_object, **kwargs)
        return cast(list[dict[str, Any]], found.get("items") or [])

    async def replace(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        """PUT the whole object; with metadata.resourceVersion set it is compare-and-swap."""
        body = {"apiVersion": self.resource.api_version, "kind": self.resource.kind, **body}
        fn = self._api.replace_namespaced_custom_object
        return cast(dict[str, Any], await self._call("replace", fn, name, body))

    async def patch(self, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        """JSON merge patch of the object (a resourceVersion in it is a precondition)."""
        fn = self._api.patch_namespaced_custom_object
        found = await self._call("patch", fn, name, patch, _content_type=MERGE_PATCH)
        return cast(dict[str, Any], found)

    async def patch_status(self, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        """JSON merge patch through the status subresource."""
        fn = self._api.patch_namespaced_custom_object_status
        found = await self._call("patch status", fn, name, patch, _content_type=MERGE_PATCH)
        return cast(dict[str, Any], found)

    async def delete(self, name: str, resource_version: str | None = None) -> bool:
        """Delete (only at ``resource_version`` when given); False if it did not exist."""
        body = None
        if resource_version is not None:
            body = kube_client.V1DeleteOptions(
                preconditions=kube_client.V1Preconditions(resource_version=resource_version)
            )
        try:
            await self._call("delete", self._api.delete_namespaced_custom_object, name, body=body)
        except NotFoundError:
            return False
        return True
