"""An in-process EventBus with Redis-stream semantics, for the embedded single-process mode.

Everything runs in one event loop, so no locks are needed: each method's bookkeeping
completes between two awaits. Waiting fetches sleep on an ``asyncio.Event`` that every
publish (and ``close``) sets, so there is no polling.
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
import json
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from flexinfer_common.bus.base import (
    HEALTH_TIMEOUT_S,
    Consumer,
    EventBus,
    Message,
    validate_names,
)
from flexinfer_common.bus.codec import encode_payload
from flexinfer_common.errors import BusError

_Id = tuple[int, int]


def format_id(msg_id: _Id) -> str:
    """Render an id the way Redis does: ``<milliseconds>-<sequence>``."""
    return f"{msg_id[0]}-{msg_id[1]}"


def parse_id(text: str) -> _Id:
    """Parse a ``ms-seq`` id; ValueError if malformed."""
    ms, _, seq = text.partition("-")
    return int(ms), int(seq or 0)


def _entry_id(entry: tuple[_Id, str]) -> _Id:
    return entry[0]


@dataclass(slots=True)
class _Pending:
    consumer: str
    deliveries: int
    delivered_at: float


@dataclass(slots=True)
class _Group:
    last_delivered: _Id
    # Insertion order follows first delivery, i.e. increasing id, like Redis' PEL.
    pending: dict[_Id, _Pending] = field(default_factory=dict)


@dataclass(slots=True)
class _Topic:
    name: str
    entries: deque[tuple[_Id, str]] = field(default_factory=deque)
    by_id: dict[_Id, str] = field(default_factory=dict)
    groups: dict[str, _Group] = field(default_factory=dict)
    last_id: _Id = (0, 0)
    changed: asyncio.Event = field(default_factory=asyncio.Event)


class MemoryBus(EventBus):
    """Topics kept in memory; see ``flexinfer_common.bus.base`` for the semantics."""

    def __init__(self, retention: int = 10_000) -> None:
        if retention < 1:
            raise ValueError("retention must be at least 1")
        self._retention = retention
        self._topics: dict[str, _Topic] = {}
        self._closed = False

    def _topic(self, name: str) -> _Topic:
        topic = self._topics.get(name)
        if topic is None:
            topic = self._topics[name] = _Topic(name)
        return topic

    def _next_id(self, topic: _Topic) -> _Id:
        now_ms = time.time_ns() // 1_000_000
        last_ms, last_seq = topic.last_id
        # Like Redis: never go backwards, even if the wall clock does.
        return (now_ms, 0) if now_ms > last_ms else (last_ms, last_seq + 1)

    async def publish(self, topic: str, payload: Mapping[str, Any]) -> str:
        """Append ``payload`` to ``topic``; return the message id."""
        validate_names(topic)
        text = encode_payload(payload)
        if self._closed:
            raise BusError("the bus is closed")
        state = self._topic(topic)
        msg_id = self._next_id(state)
        state.last_id = msg_id
        state.entries.append((msg_id, text))
        state.by_id[msg_id] = text
        while len(state.entries) > self._retention:
            old_id, _ = state.entries.popleft()
            del state.by_id[old_id]
        # Wake every waiting fetch, then arm a fresh event for the next wait.
        state.changed.set()
        state.changed = asyncio.Event()
        return format_id(msg_id)

    def consumer(self, topic: str, group: str, name: str, *, from_start: bool = False) -> Consumer:
        """A consumer named ``name`` in ``group`` (created now if missing) of ``topic``."""
        validate_names(topic, group, name)
        state = self._topic(topic)
        if group not in state.groups:
            state.groups[group] = _Group(last_delivered=(0, 0) if from_start else state.last_id)
        return _MemoryConsumer(self, state, group, name)

    @property
    def closed(self) -> bool:
        """True once ``close`` ran."""
        return self._closed

    async def ping(self, timeout_s: float = HEALTH_TIMEOUT_S) -> None:
        """In-process: always answers, until closed."""
        if self._closed:
            raise BusError("the bus is closed")

    async def close(self) -> None:
        """Wake every pending fetch (they return []) and refuse further use."""
        self._closed = True
        for state in self._topics.values():
            state.changed.set()


class _MemoryConsumer(Consumer):
    def __init__(self, bus: MemoryBus, topic: _Topic, group: str, name: str) -> None:
        self._bus = bus
        self._topic = topic
        self._group = topic.groups[group]
        self._name = name

    def _take_new(self, max_count: int) -> list[Message]:
        group, topic = self._group, self._topic
        out: list[Message] = []
        now = time.monotonic()
        # Entries are sorted by id, so the group's position is a binary search away.
        start = bisect.bisect_right(topic.entries, group.last_delivered, key=_entry_id)
        for msg_id, text in itertools.islice(topic.entries, start, start + max_count):
            group.pending[msg_id] = _Pending(self._name, 1, now)
            group.last_delivered = msg_id
            out.append(Message(format_id(msg_id), topic.name, json.loads(text), 1))
        return out

    async def fetch(self, max_count: int = 100, timeout_s: float = 1.0) -> list[Message]:
        """New messages for this group, waiting up to ``timeout_s`` for the first."""
        if max_count < 1:
            raise ValueError("max_count must be at least 1")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(timeout_s, 0.0)
        while not self._bus.closed:
            messages = self._take_new(max_count)
            if messages:
                return messages
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            try:
                async with asyncio.timeout(remaining):
                    await self._topic.changed.wait()
            except TimeoutError:
                break
        return []

    async def ack(self, *ids: str) -> None:
        """Drop ``ids`` from this group's pending list."""
        for text in ids:
            try:
                self._group.pending.pop(parse_id(text), None)
            except ValueError:
                continue

    async def reclaim(self, min_idle_s: float, max_count: int = 100) -> list[Message]:
        """Take over pending messages idle for at least ``min_idle_s``."""
        now = time.monotonic()
        out: list[Message] = []
        for msg_id, entry in list(self._group.pending.items()):
            if len(out) >= max_count:
                break
            if now - entry.delivered_at < min_idle_s:
                continue
            text = self._topic.by_id.get(msg_id)
            if text is None:
                # Trimmed away by retention: like XAUTOCLAIM, forget it.
                del self._group.pending[msg_id]
                continue
            entry.consumer, entry.delivered_at = self._name, now
            entry.deliveries += 1
            payload = json.loads(text)
            out.append(Message(format_id(msg_id), self._topic.name, payload, entry.deliveries))
        return out
