"""Publish each model's ready endpoint set (bus event + store records) when it changes.

For a Model whose engines take LoRA adapters, each endpoint also says which adapters its
engine holds, as the adapter loop last found (``held``): a proxy routes a request for an
adapter only to an endpoint that holds it. A replica the adapter loop has not looked at
yet holds none, so a new replica is announced for its base model at once and for an
adapter only once it is loaded there.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass

from flexinfer_common.api.meta import utcnow
from flexinfer_common.bus import EventBus, topics
from flexinfer_common.store import EndpointRecord, ModelStore
from flexinfer_controller.runtime import Replica

log = logging.getLogger(__name__)

Endpoint = tuple[str, str, tuple[str, ...] | None]
"""(replica id, url, the adapters its engine holds; None: the model takes none)."""


@dataclass(frozen=True, slots=True)
class _Wanted:
    """What the Model loop last asked to publish for one model."""

    urls: frozenset[tuple[str, str]]
    phase: str
    blocked: str | None
    adapters: bool
    """Its engines take LoRA adapters: each endpoint says which it holds."""


class EndpointPublisher:
    """Remembers what it last published per model and publishes only changes.

    The first sync of a model after startup always publishes, so proxies converge on the
    set this controller sees even if a previous controller published something else.
    """

    def __init__(self, bus: EventBus, store: ModelStore) -> None:
        self._bus = bus
        self._store = store
        self._published: dict[str, tuple[frozenset[Endpoint], str, str | None]] = {}
        self._wanted: dict[str, _Wanted] = {}
        self._held: dict[str, dict[str, frozenset[str]]] = {}
        """Model key -> replica id -> the adapters its engine holds (the adapter loop's)."""
        self._locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        """One publish per model at a time: the Model loop and the adapter loop both
        publish, and an event built from an older set must not carry a newer revision."""
        self._last_revision = 0

    def known(self, key: str) -> bool:
        """True if an endpoint set of ``key`` was published by this controller."""
        return key in self._published

    def _revision(self) -> int:
        # Wall-clock nanoseconds stay monotonic across controller restarts; the max() keeps
        # them strictly increasing if the clock steps back.
        self._last_revision = max(time.time_ns(), self._last_revision + 1)
        return self._last_revision

    async def sync(
        self,
        key: str,
        ready: list[Replica],
        phase: str,
        blocked: str | None = None,
        *,
        adapters: bool = False,
    ) -> bool:
        """Publish ``ready`` as ``key``'s endpoints if they (or the phase, or why the model
        is blocked) changed; True if it published. ``adapters``: the engines take LoRA
        adapters, and each endpoint says which it holds."""
        urls = [(r.id, r.url) for r in ready if r.url]
        return await self.sync_urls(key, urls, phase, blocked, adapters=adapters)

    async def sync_urls(
        self,
        key: str,
        endpoints: list[tuple[str, str]],
        phase: str,
        blocked: str | None = None,
        *,
        adapters: bool = False,
    ) -> bool:
        """Publish (replica id, url) pairs as ``key``'s endpoints if anything changed.

        The phase and the blocking reason travel with the set: a proxy holding requests
        for a model that cannot start answers them at once with the reason.
        """
        blocked = blocked[:4096] if blocked else None
        wanted = _Wanted(frozenset(endpoints), phase, blocked, adapters)
        async with self._locks[key]:
            self._wanted[key] = wanted
            # A replica that left the set forgets what it held: back (restarted in place,
            # empty), it holds nothing until the adapter loop has looked again.
            held = self._held.get(key)
            if held is not None:
                live = {rid for rid, _ in wanted.urls}
                self._held[key] = {rid: names for rid, names in held.items() if rid in live}
            return await self._publish(key, wanted)

    async def held(self, key: str, held: Mapping[str, frozenset[str] | None]) -> bool:
        """What the adapter loop found on ``key``'s ready replicas: replica id -> the
        adapters its engine holds (None: it could not ask; what it knew stands). Replicas
        left out hold none. Re-publishes the set when an endpoint's adapters changed."""
        async with self._locks[key]:
            old = self._held.get(key, {})
            new = {
                rid: old.get(rid, frozenset()) if names is None else names
                for rid, names in held.items()
            }
            if new:
                self._held[key] = new
            else:
                self._held.pop(key, None)
            wanted = self._wanted.get(key)
            if wanted is None or not wanted.adapters:
                return False
            return await self._publish(key, wanted)

    async def _publish(self, key: str, wanted: _Wanted) -> bool:
        endpoints = self._endpoints(key, wanted)
        published = (endpoints, wanted.phase, wanted.blocked)
        if self._published.get(key) == published:
            return False
        event = topics.EndpointsEvent(
            model=key,
            endpoints=[
                topics.EndpointInfo(
                    url=url, replica=rid, ready=True, adapters=None if on is None else list(on)
                )
                for rid, url, on in sorted(endpoints, key=lambda e: (e[0], e[1]))
            ],
            phase=wanted.phase,
            revision=self._revision(),
            blocked=wanted.blocked,
        )
        # Bus first: proxies must stop routing to a replica before it is stopped. No
        # ``adapters: null``: a proxy that predates the field reads the event.
        await self._bus.publish(topics.ENDPOINTS, event.model_dump(mode="json", exclude_none=True))
        await self._write_store(key, wanted.urls)
        self._published[key] = published
        log.info("endpoints of %s: %s", key, _described(endpoints))
        return True

    def _endpoints(self, key: str, wanted: _Wanted) -> frozenset[Endpoint]:
        if not wanted.adapters:
            return frozenset((rid, url, None) for rid, url in wanted.urls)
        held = self._held.get(key, {})
        return frozenset(
            (rid, url, tuple(sorted(held.get(rid, frozenset())))) for rid, url in wanted.urls
        )

    async def _write_store(self, key: str, current: frozenset[tuple[str, str]]) -> None:
        stored = {r.replica: r.url for r in await self._store.list_endpoints(key)}
        for rid in stored.keys() - {rid for rid, _ in current}:
            await self._store.delete_endpoint(key, rid)
        now = utcnow()
        for rid, url in current:
            if stored.get(rid) != url:
                await self._store.put_endpoint(
                    EndpointRecord(
                        model=key, replica=rid, url=url, ready=True, node=None, updated_at=now
                    )
                )

    async def clear(self, key: str, phase: str = "Deleted") -> None:
        """Publish an empty set for a deleted model and forget it."""
        await self.sync(key, [], phase)
        self._published.pop(key, None)
        self._wanted.pop(key, None)
        self._held.pop(key, None)


def _described(endpoints: frozenset[Endpoint]) -> object:
    """The URLs for the log, each with the adapters it holds when it says."""
    if not endpoints:
        return "none"
    ordered = sorted(endpoints, key=lambda e: (e[0], e[1]))
    return [url if on is None else f"{url} {list(on)}" for _, url, on in ordered]
