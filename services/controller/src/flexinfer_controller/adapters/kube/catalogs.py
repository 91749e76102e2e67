"""ModelCatalogs on Kubernetes: informers of them, and registry Secrets read by name.

The controller reads a Secret only when a catalog's ``secretRef`` names it, in the
catalog's own namespace, at every sync: a rotated pull secret is used at the next sync
without any watch on Secrets (RBAC grants ``get`` on secrets, nothing else).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
from collections.abc import Mapping

from flexinfer_common.errors import ConfigError
from flexinfer_common.kube.client import KubeClient
from flexinfer_common.kube.informer import Change
from flexinfer_controller.adapters.kube.store import KubernetesModelStore
from flexinfer_controller.core.feed import Enqueue


class ApiServerSecrets:
    """Secrets of the apiserver, as the catalog's SecretSource."""

    def __init__(self, client: KubeClient) -> None:
        self._client = client

    async def read(self, namespace: str, name: str) -> Mapping[str, bytes]:
        """The Secret's data, decoded; NotFoundError when absent."""
        core = self._client.core
        found = await self._client.call("get secrets", core.read_namespaced_secret, name, namespace)
        data = found.data or {}
        try:
            return {key: base64.b64decode(value) for key, value in data.items()}
        except (binascii.Error, TypeError) as exc:
            raise ConfigError(f"secret {namespace}/{name}: data is not base64") from exc


class CatalogInformerFeed:
    """Every ModelCatalog change the apiserver reports, as a sync check of its key."""

    def __init__(self, store: KubernetesModelStore, namespaces: list[str | None]) -> None:
        self._store = store
        self._namespaces = namespaces

    async def run(self, enqueue: Enqueue) -> None:
        """List and watch ModelCatalogs in every namespace until cancelled."""

        def changed(change: Change) -> None:
            enqueue(change.key)

        informers = [self._store.catalog_informer(changed, ns) for ns in self._namespaces]
        await asyncio.gather(*(informer.run() for informer in informers))
