"""An informer: list, then watch from the list's resourceVersion, resumed, relisted on 410.

It keeps the last seen state of every key (the object itself, or what ``decode`` makes of
it, so a reader gets parsed facts without parsing per request) and calls ``on_change``
with a ``Change`` (namespace/name key) for each add, update and delete, which the
controller's reconcile core uses as it uses the SQL store's change events: to queue the
key. A watch that ends (the apiserver's timeout, a dropped connection) resumes from the
last resourceVersion seen, which bookmarks advance without any object changing; one that
gets 410 Gone relists, and the relist is compared with what was seen, so every change in
the gap is reported once: new and changed objects as ADDED/MODIFIED, vanished ones as
DELETED, unchanged ones not at all.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar, overload

from flexinfer_common.errors import StoreError
from flexinfer_common.kube.client import Obj, ResourceExpiredError

log = logging.getLogger(__name__)
T = TypeVar("T")
_END = object()


@dataclass(frozen=True)
class Change:
    """One change of one object, as the informer saw it."""

    kind: str
    type: str
    """ADDED, MODIFIED or DELETED."""
    key: str
    """The informer's key: namespace/name (``/name`` for cluster-scoped objects) unless
    it was given another."""
    resource_version: str


class Stream(Protocol):
    """One watch request's events, read in a worker thread; ``stop`` unblocks the reader."""

    def __iter__(self) -> Iterator[Obj]:
        """The decoded watch events, until the stream ends."""

    def stop(self) -> None:
        """End the stream from another thread."""


class ListWatch(Protocol):
    """Where an informer lists and watches one kind of object."""

    kind: str
    plural: str

    async def list(self, namespace: str | None) -> tuple[list[Obj], str]:
        """Every object (of one namespace) and the list's resourceVersion."""

    def watch(self, namespace: str | None, resource_version: str, timeout_s: int) -> Stream:
        """A watch after ``resource_version``, with bookmarks."""


def object_key(obj: Obj) -> str:
    """``namespace/name`` of an object (``/name`` when cluster-scoped)."""
    meta = obj["metadata"]
    return f"{meta.get('namespace', '')}/{meta['name']}"


def object_name(obj: Obj) -> str:
    """An object's name alone (a key for cluster-scoped kinds)."""
    return str(obj["metadata"]["name"])


def _version(obj: Obj) -> str:
    return str(obj["metadata"]["resourceVersion"])


def _ignore(change: Change) -> None:
    return None


def _as_is(obj: Obj) -> Obj:
    return obj


class Informer(Generic[T]):
    """Keeps a cache of one resource in sync and reports its changes.

    ``decode`` turns each new or changed object into what is cached (the object itself by
    default); it is called once per resourceVersion, in the event loop, and must not raise.
    ``key`` names an object in the cache and in changes (``namespace/name`` by default;
    ``object_name`` suits a cluster-scoped kind looked up by name).
    """

    @overload
    def __init__(
        self: Informer[Obj],
        source: ListWatch,
        on_change: Callable[[Change], None] = ...,
        *,
        key: Callable[[Obj], str] = ...,
        namespace: str | None = None,
        watch_timeout_s: int = 300,
        backoff_s: tuple[float, float] = (0.1, 5.0),
    ) -> None: ...

    @overload
    def __init__(
        self,
        source: ListWatch,
        on_change: Callable[[Change], None] = ...,
        *,
        decode: Callable[[Obj], T],
        key: Callable[[Obj], str] = ...,
        namespace: str | None = None,
        watch_timeout_s: int = 300,
        backoff_s: tuple[float, float] = (0.1, 5.0),
    ) -> None: ...

    def __init__(
        self,
        source: ListWatch,
        on_change: Callable[[Change], None] = _ignore,
        *,
        decode: Callable[[Obj], Any] = _as_is,
        key: Callable[[Obj], str] = object_key,
        namespace: str | None = None,
        watch_timeout_s: int = 300,
        backoff_s: tuple[float, float] = (0.1, 5.0),
    ) -> None:
        self._source = source
        self._on_change = on_change
        self._decode = decode
        self._key = key
        self._namespace = namespace
        self._watch_timeout_s = watch_timeout_s
        self._backoff_s = backoff_s
        self._cache: dict[str, T] = {}
        self._versions: dict[str, str] = {}
        """Each key's last seen resourceVersion: what a relist or a replay is compared with."""
        self.resource_version: str | None = None
        self.synced = asyncio.Event()
        self.lists = 0
        self.watches = 0
        self.bookmarks = 0
        self._progress = asyncio.Event()

    def get(self, key: str) -> T | None:
        """The last seen state of ``key``."""
        return self._cache.get(key)

    def keys(self) -> list[str]:
        """Every key seen and not deleted, sorted."""
        return sorted(self._cache)

    def view(self) -> Mapping[str, T]:
        """The cache itself, read-only and live: key -> last seen state."""
        return self._cache

    async def wait_until(self, predicate: Callable[[Informer[T]], bool]) -> None:
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
        listed = {self._key(o): o for o in items}
        for key in sorted(set(self._cache) - set(listed)):
            self._forget(key)
            self._emit("DELETED", key, version)  # deleted somewhere before the list's version
        for key, obj in sorted(listed.items()):
            rv, seen = _version(obj), self._versions.get(key)
            if seen == rv:
                continue  # unchanged: its state is already cached
            self._store(key, obj, rv)
            self._emit("ADDED" if seen is None else "MODIFIED", key, rv)
        self.resource_version = version
        self.synced.set()
        self._advanced()

    def _store(self, key: str, obj: Obj, rv: str) -> None:
        self._cache[key] = self._decode(obj)
        self._versions[key] = rv

    def _forget(self, key: str) -> None:
        self._cache.pop(key, None)
        self._versions.pop(key, None)

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
        rv = _version(obj)
        if kind == "BOOKMARK":
            self.bookmarks += 1
            self.resource_version = rv
            return
        key = self._key(obj)
        if kind == "DELETED":
            self._forget(key)
        else:
            seen = self._versions.get(key)
            self.resource_version = rv
            if seen == rv:
                return  # already reported (a watch from "0" replays the current state)
            self._store(key, obj, rv)
            kind = "MODIFIED" if seen is not None else "ADDED"
        self.resource_version = rv
        self._emit(str(kind), key, rv)

    def _emit(self, kind: str, key: str, rv: str) -> None:
        self._on_change(Change(self._source.kind, kind, key, rv))


def _pump(stream: Stream, loop: asyncio.AbstractEventLoop, queue: asyncio.Queue[Any]) -> None:
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
