"""An informer: list, then watch from the list's resourceVersion, resumed, relisted on 410.

It keeps the last seen object of every key and calls ``on_change`` with a ``Change``
(namespace/name key) for each add, update and delete, which the reconcile core uses as it
uses the SQL store's change events: to queue the key. A watch that ends (the apiserver's
timeout, a dropped connection) resumes from the last resourceVersion seen, which
bookmarks advance without any object changing; one that gets 410 Gone relists, and the
relist is compared with what was seen, so every change in the gap is reported once: new
and changed objects as ADDED/MODIFIED, vanished ones as DELETED, unchanged ones not at all.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from flexinfer_common.errors import StoreError
from flexinfer_controller.adapters.kube.client import (
    KubeClient,
    Obj,
    Resource,
    ResourceExpiredError,
    WatchStream,
)
from flexinfer_controller.adapters.kube.objects import CustomObjects

log = logging.getLogger(__name__)
_END = object()


@dataclass(frozen=True)
class Change:
    """One change of one object, as the informer saw it."""

    kind: str
    type: str
    """ADDED, MODIFIED or DELETED."""
    key: str
    """namespace/name."""
    resource_version: str


class ListWatch(Protocol):
    """Where an informer lists and watches one kind of object."""

    kind: str
    plural: str

    async def list(self, namespace: str | None) -> tuple[list[Obj], str]:
        """Every object (of one namespace) and the list's resourceVersion."""

    def watch(self, namespace: str | None, resource_version: str, timeout_s: int) -> WatchStream:
        """A watch after ``resource_version``, with bookmarks."""


class CustomListWatch:
    """List and watch of one custom resource."""

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
        """A watch of the custom resource."""
        return self._client.watch(self._resource, namespace, resource_version, timeout_s)


def _key(obj: Obj) -> str:
    meta = obj["metadata"]
    return f"{meta.get('namespace', '')}/{meta['name']}"


class Informer:
    """Keeps a cache of one resource in sync and reports its changes."""

    def __init__(
        self,
        source: ListWatch,
        on_change: Callable[[Change], None],
        *,
        namespace: str | None = None,
        watch_timeout_s: int = 300,
        backoff_s: tuple[float, float] = (0.1, 5.0),
    ) -> None:
        self._source = source
        self._on_change = on_change
        self._namespace = namespace
        self._watch_timeout_s = watch_timeout_s
        self._backoff_s = backoff_s
        self._cache: dict[str, Obj] = {}
        self.resource_version: str | None = None
        self.synced = asyncio.Event()
        self.lists = 0
        self.watches = 0
        self.bookmarks = 0
        self._progress = asyncio.Event()

    def get(self, key: str) -> Obj | None:
        """The last seen object of ``key``."""
        return self._cache.get(key)

    def keys(self) -> list[str]:
        """Every key seen and not deleted, sorted."""
        return sorted(self._cache)

    async def wait_until(self, predicate: Callable[[Informer], bool]) -> None:
        """Return once ``predicate(self)`` holds, re-checked after every list and event."""
        while not predicate(self):
            await self._progress.wait()

    def _advanced(self) -> None:
        self._progress.set()
        self._progress = asyncio.Event()  # waiters hold the set one; later ones wait anew

    async def run(self) -> None:
        """List and watch until cancelled; apiserver failures are retried with backoff."""
        delay = self._backoff_s[0]
        while True:
            try:
                await self._relist()
                await self._watch_until_expired()
                delay = self._backoff_s[0]
            except StoreError as exc:
                log.warning(
                    "listing %s failed (retry in %.1fs): %s", self._source.plural, delay, exc
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, self._backoff_s[1])

    async def _relist(self) -> None:
        items, version = await self._source.list(self._namespace)
        self.lists += 1
        listed = {_key(o): o for o in items}
        for key in sorted(set(self._cache) - set(listed)):
            del self._cache[key]
            self._emit("DELETED", key, version)  # deleted somewhere before the list's version
        for key, obj in sorted(listed.items()):
            seen = self._cache.get(key)
            self._cache[key] = obj
            rv = str(obj["metadata"]["resourceVersion"])
            if seen is None:
                self._emit("ADDED", key, rv)
            elif str(seen["metadata"]["resourceVersion"]) != rv:
                self._emit("MODIFIED", key, rv)
        self.resource_version = version
        self.synced.set()
        self._advanced()

    async def _watch_until_expired(self) -> None:
        delay = self._backoff_s[0]
        while True:
            try:
                await self._watch_once()
                delay = self._backoff_s[0]
            except ResourceExpiredError as exc:
                log.info("watch of %s expired, relisting: %s", self._source.plural, exc)
                return
            except StoreError as exc:
                log.warning(
                    "watch of %s broke (resume in %.1fs): %s", self._source.plural, delay, exc
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, self._backoff_s[1])

    async def _watch_once(self) -> None:
        """One watch request, from the last resourceVersion, until the stream ends."""
        assert self.resource_version is not None
        stream = self._source.watch(self._namespace, self.resource_version, self._watch_timeout_s)
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Any] = asyncio.Queue()
        thread = threading.Thread(
            target=_pump,
            args=(stream, loop, queue),
            name=f"watch-{self._source.plural}",
            daemon=True,
        )
        self.watches += 1
        thread.start()
        try:
            while True:
                item = await queue.get()
                if item is _END:
                    return
                if isinstance(item, BaseException):
                    raise item
                self._apply(item)
                self._advanced()
        finally:
            stream.stop()

    def _apply(self, event: Obj) -> None:
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            code, message = obj.get("code"), obj.get("message")
            if code == 410:
                raise ResourceExpiredError(f"watch {self._source.plural}: 410 {message}")
            raise StoreError(f"watch {self._source.plural}: {code} {message}")
        rv = str(obj["metadata"]["resourceVersion"])
        if kind == "BOOKMARK":
            self.bookmarks += 1
            self.resource_version = rv
            return
        key = _key(obj)
        if kind == "DELETED":
            self._cache.pop(key, None)
        else:
            seen = self._cache.get(key)
            self._cache[key] = obj
            if seen is not None and str(seen["metadata"]["resourceVersion"]) == rv:
                self.resource_version = rv
                return  # already reported (a watch from "0" replays the current state)
            kind = "MODIFIED" if seen is not None else "ADDED"
        self.resource_version = rv
        self._emit(str(kind), key, rv)

    def _emit(self, kind: str, key: str, rv: str) -> None:
        self._on_change(Change(self._source.kind, kind, key, rv))


def _pump(stream: WatchStream, loop: asyncio.AbstractEventLoop, queue: asyncio.Queue[Any]) -> None:
    """Read the stream in this thread and hand its events (or its error) to the loop."""

    def put(item: Any) -> None:
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody is waiting any more
            loop.call_soon_threadsafe(queue.put_nowait, item)

    try:
        for event in stream:
            put(event)
        put(_END)
    except BaseException as exc:  # handed to the loop, which raises it
        put(exc)
