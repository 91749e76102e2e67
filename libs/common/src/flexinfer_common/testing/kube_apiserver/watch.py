"""Watch streams: events after a resourceVersion, bookmarks, 410 Gone, server-side ends.

A watch from resourceVersion N replays the retained events after N, then waits for new
ones. Without N (or with "0") it starts with a synthetic ADDED per current object. With a
label or field selector an object that starts (stops) matching is ADDED (DELETED), as the
real apiserver does. A too-old N gets one ERROR event carrying a 410 Status (reason
Expired), not an HTTP error. Streams end at ``timeoutSeconds``, when the test drops them,
or when the server stops.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from flexinfer_common.testing.kube_apiserver.errors import ApiError
from flexinfer_common.testing.kube_apiserver.objects import ObjectStore, StoredEvent
from flexinfer_common.testing.kube_apiserver.selectors import Predicate
from flexinfer_common.testing.kube_apiserver.types import ResourceType

Event = dict[str, Any]


@dataclass(frozen=True)
class Drop:
    """The stream ends here; ``abrupt``: the connection is cut without ending the chunks."""

    abrupt: bool


@dataclass
class WatchRequest:
    """What one watch asked for."""

    rt: ResourceType
    namespace: str | None
    selects: Predicate
    resource_version: str | None
    bookmarks: bool
    timeout_s: float | None
    bookmark_seen: int = 0
    drop_seen: int = 0
    """The epochs when the watch was registered: later bookmarks and drops apply to it."""

    def matches(self, obj: dict[str, Any] | None) -> bool:
        """Whether the watch selects ``obj``."""
        if obj is None:
            return False
        if self.namespace is not None and obj["metadata"].get("namespace") != self.namespace:
            return False
        return self.selects(obj)


def _translate(request: WatchRequest, event: StoredEvent) -> Event | None:
    now, before = request.matches(event.obj), request.matches(event.old)
    if event.type == "DELETED":
        return {"type": "DELETED", "object": event.obj} if before or now else None
    if now and before:
        return {"type": event.type, "object": event.obj}
    if now:
        return {"type": "ADDED", "object": event.obj}
    if before:
        return {"type": "DELETED", "object": event.obj}
    return None


def _bookmark(rt: ResourceType, rv: int) -> Event:
    meta = {"resourceVersion": str(rv)}
    return {
        "type": "BOOKMARK",
        "object": {"kind": rt.kind, "apiVersion": rt.api_version, "metadata": meta},
    }


def start(store: ObjectStore, request: WatchRequest) -> tuple[int, list[Event]]:
    """Register the watch: the resourceVersion it starts after, and its initial events.

    Counted in ``store.open_watches`` (the caller decrements it when the stream ends) in
    the same critical section that fixes its epochs, so a test that saw the watch open
    can be sure a drop or bookmark it asks for next reaches it. 400 for a bad RV.
    """
    text = request.resource_version
    with store.cond:
        if text and text != "0" and not text.isdigit():
            raise ApiError(400, f"invalid resource version {text!r}")
        request.bookmark_seen, request.drop_seen = store.bookmark_epoch, store.drop_epoch
        store.open_watches[request.rt.qualified] += 1
        store.notify()
        if not text or text == "0":
            objs = store.items(request.rt, request.namespace)
            return store.rv, [{"type": "ADDED", "object": o} for o in objs if request.matches(o)]
        return int(text), []


def stream(store: ObjectStore, request: WatchRequest, since: int) -> Iterator[Event | Drop]:
    """The events of one watch, until it ends (call ``start`` first)."""
    deadline = None if request.timeout_s is None else time.monotonic() + request.timeout_s
    bookmark_seen, drop_seen = request.bookmark_seen, request.drop_seen
    while True:
        pending: list[StoredEvent] = []
        bookmark: int | None = None
        with store.cond:
            while True:
                if store.closed:
                    return
                if store.drop_epoch != drop_seen:
                    end: Drop | ApiError | None = Drop(store.drop_abrupt)
                    break
                try:
                    pending = store.since(since, request.rt.group, request.rt.plural)
                except ApiError as exc:
                    end = exc
                    break
                end = None
                if request.bookmarks and store.bookmark_epoch != bookmark_seen:
                    bookmark_seen, bookmark = store.bookmark_epoch, store.rv
                if pending or bookmark is not None:
                    break
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return
                store.cond.wait(remaining)
        if isinstance(end, Drop):
            yield end
            return
        if isinstance(end, ApiError):
            yield {"type": "ERROR", "object": end.status()}
            return
        for event in pending:
            since = event.rv
            out = _translate(request, event)
            if out is not None:
                yield out
        if bookmark is not None:
            since = max(since, bookmark)
            yield _bookmark(request.rt, since)
