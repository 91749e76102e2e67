"""The object store: objects by key, the resourceVersion counter and the watch history.

Every write takes the next resourceVersion (one counter for all types, like etcd's
revision) and appends an event to the history that watches replay. The history keeps the
last ``history_limit`` events; a watch from a resourceVersion older than that gets 410.
All state is guarded by one condition variable, which every change notifies, so watchers
and test code can wait on it instead of polling.
"""

from __future__ import annotations

import copy
import threading
from collections import Counter, deque
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from flexinfer_common.testing.kube_apiserver.errors import ApiError
from flexinfer_common.testing.kube_apiserver.types import ResourceType

Key = tuple[str, str, str, str]
"""(group, plural, namespace, name); namespace is "" for cluster-scoped objects."""


def key_of(rt: ResourceType, namespace: str | None, name: str) -> Key:
    """The store key of one object."""
    return (rt.group, rt.plural, namespace or "", name)


def now_rfc3339() -> str:
    """The current time as the apiserver writes timestamps (seconds, Z)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class StoredEvent:
    """One change in the history: its resourceVersion, type and the object after (and before)."""

    rv: int
    type: str
    group: str
    plural: str
    obj: dict[str, Any]
    old: dict[str, Any] | None


class ObjectStore:
    """State shared by the REST handlers, the watches and the test hooks."""

    def __init__(self, history_limit: int) -> None:
        self.cond = threading.Condition(threading.RLock())
        self.objects: dict[Key, dict[str, Any]] = {}
        self.logs: dict[tuple[str, str], str] = {}
        self.rv = 0
        self.history: deque[StoredEvent] = deque()
        self.history_limit = history_limit
        self.compacted = 0
        """Events up to this resourceVersion are gone: watches from before it get 410."""
        self.bookmark_epoch = 0
        self.drop_epoch = 0
        self.drop_abrupt = False
        self.open_watches: Counter[str] = Counter()
        self.closed = False

    def next_rv(self) -> str:
        """Take the next resourceVersion."""
        self.rv += 1
        return str(self.rv)

    def notify(self) -> None:
        """Wake every watcher and waiter (call with the lock held)."""
        self.cond.notify_all()

    def emit(
        self, kind: str, rt: ResourceType, obj: dict[str, Any], old: dict[str, Any] | None
    ) -> None:
        """Record a change at the object's resourceVersion and trim the history to its limit."""
        rv = int(obj["metadata"]["resourceVersion"])
        event = StoredEvent(rv, kind, rt.group, rt.plural, copy.deepcopy(obj), copy.deepcopy(old))
        self.history.append(event)
        while len(self.history) > self.history_limit:
            self.compacted = self.history.popleft().rv
        self.notify()

    def compact(self) -> None:
        """Forget the whole history: every watch from before now gets 410 Gone."""
        with self.cond:
            self.compacted = self.rv
            self.history.clear()
            self.notify()

    def since(self, rv: int, group: str, plural: str) -> list[StoredEvent]:
        """The events of one type after ``rv`` (call with the lock held; 410 if compacted)."""
        if rv < self.compacted:
            raise gone(rv, self.compacted)
        found = []
        for event in reversed(self.history):
            if event.rv <= rv:
                break
            if event.group == group and event.plural == plural:
                found.append(event)
        found.reverse()
        return found

    def get(self, key: Key) -> dict[str, Any] | None:
        """The stored object (not a copy), or None."""
        return self.objects.get(key)

    def items(self, rt: ResourceType, namespace: str | None) -> list[dict[str, Any]]:
        """Copies of the objects of one type (in one namespace), ordered by key."""
        return [
            copy.deepcopy(obj)
            for key, obj in sorted(self.objects.items())
            if key[:2] == (rt.group, rt.plural) and (namespace is None or key[2] == namespace)
        ]


def gone(rv: int, oldest: int) -> ApiError:
    """The 410 a watch from a compacted resourceVersion gets (reason Expired, as etcd's)."""
    return ApiError(410, f"too old resource version: {rv} ({oldest})", "Expired")
