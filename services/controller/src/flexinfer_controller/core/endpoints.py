"""Publish each model's ready endpoint set (bus event + store records) when it changes."""

from __future__ import annotations

import logging
import time

from flexinfer_common.api.meta import utcnow
from flexinfer_common.bus import EventBus, topics
from flexinfer_common.store import EndpointRecord, ModelStore
from flexinfer_controller.runtime import Replica

log = logging.getLogger(__name__)


class EndpointPublisher:
    """Remembers what it last published per model and publishes only changes.

    The first sync of a model after startup always publishes, so proxies converge on the
    set this controller sees even if a previous controller published something else.
    """

    def __init__(self, bus: EventBus, store: ModelStore) -> None:
        self._bus = bus
        self._store = store
        self._published: dict[str, tuple[frozenset[tuple[str, str]], str, str | None]] = {}
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
        self, key: str, ready: list[Replica], phase: str, blocked: str | None = None
    ) -> bool:
        """Publish ``ready`` as ``key``'s endpoints if they (or the phase, or why the model
        is blocked) changed; True if it published."""
        urls = [(r.id, r.url) for r in ready if r.url]
        return await self.sync_urls(key, urls, phase, blocked)

    async def sync_urls(
        self, key: str, endpoints: list[tuple[str, str]], phase: str, blocked: str | None = None
    ) -> bool:
        """Publish (replica id, url) pairs as ``key``'s endpoints if anything changed.

        The phase and the blocking reason travel with the set: a proxy holding requests
        for a model that cannot start answers them at once with the reason.
        """
        current = frozenset(endpoints)
        blocked = blocked[:4096] if blocked else None
        published = (current, phase, blocked)
        if self._published.get(key) == published:
            return False
        event = topics.EndpointsEvent(
            model=key,
            endpoints=[
                topics.EndpointInfo(url=url, replica=rid, ready=True)
                for rid, url in sorted(current)
            ],
            phase=phase,
            revision=self._revision(),
            blocked=blocked,
        )
        # Bus first: proxies must stop routing to a replica before it is stopped.
        await self._bus.publish(topics.ENDPOINTS, event.model_dump(mode="json"))
        await self._write_store(key, current)
        self._published[key] = published
        log.info("endpoints of %s: %s", key, [url for _, url in sorted(current)] or "none")
        return True

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
