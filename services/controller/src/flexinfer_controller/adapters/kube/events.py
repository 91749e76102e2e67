"""Kubernetes Events on Models (``core/events``): core/v1 Events whose involvedObject is the
Model, so that ``kubectl describe model NAME`` and ``kubectl get events`` show them.

Each is written in the background: the Model's uid is read first (``describe`` matches
Events by it), then the Event is created. A failure is logged and dropped: an Event is not
worth a retry loop, and the next swap or sleep writes another.

An Event that repeats one written less than ``SERIES_WINDOW_S`` ago (the same Model, type,
reason and message) raises that one's ``count`` and ``lastTimestamp`` instead of adding
another, as client-go's event correlator does: ``kubectl describe`` then shows "x12 over
5m" on one line, and a swap that flaps writes one object, not hundreds.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from flexinfer_common.api.meta import utcnow
from flexinfer_common.errors import FlexInferError, NotFoundError
from flexinfer_common.kube.client import KubeClient
from flexinfer_common.store import ModelStore

log = logging.getLogger(__name__)

COMPONENT = "flexinfer-controller"
"""The Events' source and reporting controller."""
SERIES_WINDOW_S = 600.0
"""A repeat within 10 minutes of an Event's last occurrence counts on it (client-go's)."""
SERIES_LIMIT = 4096
"""Series remembered (least recently seen forgotten first): a forgotten one starts anew."""

SeriesKey = tuple[str, str, str, str, str, str]
"""namespace, Model name, Model uid, type, reason, message."""


@dataclass(slots=True)
class _Series:
    """The Event object a repeat counts on."""

    name: str
    count: int
    last: float
    """When it was last counted (the clock's seconds)."""


class KubeEvents:
    """Writes core/v1 Events on Models."""

    def __init__(
        self,
        client: KubeClient,
        store: ModelStore,
        instance: str = "",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._store = store
        self._instance = instance
        self._clock = clock
        self._pending: set[asyncio.Task[None]] = set()
        self._series: OrderedDict[SeriesKey, _Series] = OrderedDict()
        self._writing = asyncio.Lock()
        """One write at a time: two repeats in flight at once must not both create."""

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
            uid = model.metadata.uid or ""
            async with self._writing:
                series_key = (namespace, name, uid, kind, reason, message[:1024])
                if await self._count_again(series_key):
                    return
                body = event_body(namespace, name, uid, kind, reason, message)
                body["reportingInstance"] = self._instance
                created = await self._create(namespace, body)
                self._remember(series_key, _Series(created, 1, self._clock()))
        except FlexInferError as exc:
            log.info("event %s on %s not written: %s", reason, key, exc)

    async def _count_again(self, key: SeriesKey) -> bool:
        """Count a repeat on its series' Event; False when there is none to count on (none
        yet, its window passed, or the Event is gone: Events expire after an hour)."""
        series = self._series.get(key)
        now = self._clock()
        if series is None or now - series.last >= SERIES_WINDOW_S:
            return False
        patch = {"count": series.count + 1, "lastTimestamp": _timestamp()}
        try:
            await self._patch(key[0], series.name, patch)
        except NotFoundError:
            del self._series[key]
            return False
        self._remember(key, _Series(series.name, series.count + 1, now))
        return True

    def _remember(self, key: SeriesKey, series: _Series) -> None:
        self._series[key] = series
        self._series.move_to_end(key)
        while len(self._series) > SERIES_LIMIT:
            self._series.popitem(last=False)

    async def _create(self, namespace: str, body: dict[str, Any]) -> str:
        """Create the Event; its name (the apiserver generates it)."""
        core = self._client.core

        def send(**kwargs: Any) -> str:
            response = core.create_namespaced_event(
                namespace, body, _preload_content=False, **kwargs
            )
            try:
                created: dict[str, Any] = json.loads(response.data)
            finally:
                response.release_conn()
            return str(created["metadata"]["name"])

        return await self._client.call("create events", send)

    async def _patch(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        core = self._client.core

        def send(**kwargs: Any) -> None:
            response = core.patch_namespaced_event(
                name, namespace, patch, _preload_content=False, **kwargs
            )
            try:
                response.data  # read whole, so the pooled connection can be reused  # noqa: B018
            finally:
                response.release_conn()

        await self._client.call("patch events", send)


def _timestamp() -> str:
    """Now, as an Event's timestamps are written (whole seconds, UTC)."""
    return utcnow().strftime("%Y-%m-%dT%H:%M:%SZ")


def event_body(
    namespace: str, name: str, uid: str, kind: str, reason: str, message: str
) -> dict[str, Any]:
    """A core/v1 Event on Model ``namespace/name``."""
    now = _timestamp()
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
