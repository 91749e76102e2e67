"""Kubernetes Events on Models (``core/events``): core/v1 Events whose involvedObject is the
Model, so that ``kubectl describe model NAME`` and ``kubectl get events`` show them.

Each is written in the background: the Model's uid is read first (``describe`` matches
Events by it), then the Event is created. A failure is logged and dropped: an Event is not
worth a retry loop, and the next swap or sleep writes another.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from flexinfer_common.api.meta import utcnow
from flexinfer_common.errors import FlexInferError
from flexinfer_common.kube.client import KubeClient
from flexinfer_common.store import ModelStore

log = logging.getLogger(__name__)

COMPONENT = "flexinfer-controller"
"""The Events' source and reporting controller."""


class KubeEvents:
    """Writes core/v1 Events on Models."""

    def __init__(self, client: KubeClient, store: ModelStore, instance: str = "") -> None:
        self._client = client
        self._store = store
        self._instance = instance
        self._pending: set[asyncio.Task[None]] = set()

    def record(self, key: str, reason: str, message: str, *, warning: bool = False) -> None:
        """Write the Event in the background."""
        kind = "Warning" if warning else "Normal"
        task = asyncio.get_running_loop().create_task(self._write(key, kind, reason, message))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def aclose(self) -> None:
        """Wait for the Events still being written."""
        if self._pending:
            await asyncio.gather(*self._pending, return_exceptions=True)

    async def _write(self, key: str, kind: str, reason: str, message: str) -> None:
        namespace, _, name = key.partition("/")
        try:
            model = await self._store.get_model(namespace, name)
            body = event_body(namespace, name, model.metadata.uid or "", kind, reason, message)
            body["reportingInstance"] = self._instance
            await self._create(namespace, body)
        except FlexInferError as exc:
            log.info("event %s on %s not written: %s", reason, key, exc)

    async def _create(self, namespace: str, body: dict[str, Any]) -> None:
        core = self._client.core

        def send(**kwargs: Any) -> None:
            response = core.create_namespaced_event(
                namespace, body, _preload_content=False, **kwargs
            )
            try:
                response.data  # read whole, so the pooled connection can be reused  # noqa: B018
            finally:
                response.release_conn()

        await self._client.call("create events", send)


def event_body(
    namespace: str, name: str, uid: str, kind: str, reason: str, message: str
) -> dict[str, Any]:
    """A core/v1 Event on Model ``namespace/name``."""
    now = utcnow().strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{name}.", "namespace": namespace},
        "involvedObject": {
            "apiVersion": "ai.flexinfer/v1alpha2", "kind": "Model", "name": name,
            "namespace": namespace, "uid": uid,
        },
        "type": kind, "reason": reason, "message": message[:1024],
        "source": {"component": COMPONENT},
        "firstTimestamp": now, "lastTimestamp": now, "count": 1,
        "reportingComponent": COMPONENT,
    }  # fmt: skip
