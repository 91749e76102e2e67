"""The agent's Node through the official ``kubernetes`` client (in worker threads).

Two calls only, which is all its ClusterRole allows (k8s/base/rbac.yaml): GET its Node and
PATCH it with a JSON merge patch holding only the agent's own keys.
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any, cast

import urllib3.exceptions
from kubernetes import client as kube_client
from kubernetes import config as kube_config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from flexinfer_agent.core.heartbeat import NodeSnapshot
from flexinfer_agent.core.labels import merge_patch
from flexinfer_agent.settings import KubeSettings
from flexinfer_common.errors import ConfigError, NotFoundError, StoreError

MERGE_PATCH = "application/merge-patch+json"
REQUEST_TIMEOUT = (5.0, 30.0)
"""(connect, read) seconds per call: an unreachable apiserver fails the heartbeat fast."""


def configuration(settings: KubeSettings) -> Any:
    """``settings.host`` if given, else in-cluster, else the kubeconfig."""
    if settings.host is not None:
        return kube_client.Configuration(host=settings.host)
    config = kube_client.Configuration()
    try:
        kube_config.load_incluster_config(client_configuration=config)
    except ConfigException:
        path = str(settings.kubeconfig) if settings.kubeconfig else os.environ.get("KUBECONFIG")
        try:
            kube_config.load_kube_config(config_file=path, client_configuration=config)
        except (ConfigException, OSError) as exc:
            raise ConfigError(f"no Kubernetes configuration found: {exc}") from exc
    return config


class NodeClient:
    """GET and merge-PATCH of one Node."""

    def __init__(self, settings: KubeSettings) -> None:
        self._api_client = kube_client.ApiClient(configuration(settings))
        self._core = kube_client.CoreV1Api(self._api_client)

    async def get(self, name: str) -> dict[str, Any]:
        """The Node as JSON (raw: the typed model refuses some kubelets' statuses)."""
        return await self._call(f"get node {name}", self._read, name)

    async def patch(self, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        """Apply a JSON merge patch to the Node."""
        return await self._call(f"patch node {name}", self._patch, name, patch)

    def _read(self, name: str) -> dict[str, Any]:
        response = self._core.read_node(
            name, _preload_content=False, _request_timeout=REQUEST_TIMEOUT
        )
        try:
            return cast(dict[str, Any], json.loads(response.data))
        finally:
            response.release_conn()

    def _patch(self, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        response = self._core.patch_node(
            name, patch, _content_type=MERGE_PATCH, _preload_content=False,
            _request_timeout=REQUEST_TIMEOUT,
        )  # fmt: skip
        try:
            return cast(dict[str, Any], json.loads(response.data))
        finally:
            response.release_conn()

    async def _call(self, what: str, fn: Any, *args: Any) -> dict[str, Any]:
        try:
            return cast(dict[str, Any], await asyncio.to_thread(fn, *args))
        except ApiException as exc:
            message = f"kubernetes {what}: {exc.status} {exc.reason}"
            raise (NotFoundError if exc.status == 404 else StoreError)(message) from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise StoreError(f"kubernetes {what}: apiserver unreachable: {exc}") from exc

    async def close(self) -> None:
        """Close the connection pool."""
        await asyncio.to_thread(self._api_client.close)


class NodeLabeler:
    """Reports a heartbeat as the agent's labels and annotations on its own Node."""

    def __init__(self, client: NodeClient, prefix: str) -> None:
        self._client = client
        self._prefix = prefix
        self.patches = 0
        """How many patches were sent (none when the Node already said it all)."""

    async def report(self, snapshot: NodeSnapshot) -> None:
        """Patch the Node with what changed; nothing when nothing did."""
        node = await self._client.get(snapshot.node)
        patch = merge_patch(node.get("metadata") or {}, snapshot.keys, self._prefix)
        if patch is not None:
            await self._client.patch(snapshot.node, patch)
            self.patches += 1
