"""One consumer of a RedisBus consumer group: XREADGROUP, XACK, XAUTOCLAIM.

A group that vanished (Redis restarted without its data) is re-created reading its stream
from the start, so nothing published into the new stream is skipped.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from flexinfer_common.bus.base import Consumer, Message
from flexinfer_common.bus.codec import decode_payload
from flexinfer_common.bus.memory import parse_id
from flexinfer_common.errors import BusError

if TYPE_CHECKING:
    from flexinfer_common.bus.redis import RedisBus

PAYLOAD_FIELD = "payload"
"""The stream entry field that holds the event's JSON text."""

OP_TIMEOUT_S = 10.0
"""Upper bound on one Redis round trip (beyond a fetch's own wait): long enough for a busy
server, short enough that a hung connection surfaces as BusError rather than a stall."""

_log = logging.getLogger(__name__)


class RedisConsumer(Consumer):
    """One consumer of a Redis consumer group."""

    def __init__(
        self,
        bus: RedisBus,
        topic: str,
        group: str,
        name: str,
        *,
        start: str,
        creation: asyncio.Task[None] | None,
    ) -> None:
        self._bus = bus
        self._topic = topic
        self._key = bus.key(topic)
        self._group = group
        self._name = name
        self._start = start
        self._creation = creation
        self._ready = False

    async def _ensure_group(self) -> None:
        if self._ready:
            return
        task, self._creation = self._creation, None
        if task is not None:
            await asyncio.wait({task})
            if not task.cancelled() and task.exception() is None:
                self._ready = True
                return
        await self._bus.create_group(self._key, self._group, self._start)
        self._ready = True

    def _lost_group(self, exc: BusError) -> bool:
        """True (and re-create later) if Redis lost the group, e.g. restarted without data."""
        if "NOGROUP" not in str(exc):
            return False
        _log.warning("bus group %s of %s vanished; re-creating it", self._group, self._key)
        # The stream is new (or was emptied): read it from the start so nothing is skipped.
        self._ready, self._start = False, "0"
        return True

    async def fetch(self, max_count: int = 100, timeout_s: float = 1.0) -> list[Message]:
        """New messages for this group (XREADGROUP ... BLOCK), waiting up to ``timeout_s``."""
        if max_count < 1:
            raise ValueError("max_count must be at least 1")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(timeout_s, 0.0)
        while not self._bus.closed:
            await self._ensure_group()
            try:
                entries = await self._bus.until_closed(
                    self._read(max_count, deadline - loop.time())
                )
            except BusError as exc:
                if self._lost_group(exc):
                    continue
                raise
            if not entries:
                return []
            messages = await self._decode(entries, lambda _id: 1)
            # Only malformed entries arrived: keep waiting for real ones while time is left.
            if messages or loop.time() >= deadline:
                return messages
        return []

    async def _read(self, count: int, remaining_s: float) -> list[tuple[Any, Any]]:
        block = max(1, int(remaining_s * 1000)) if remaining_s > 0 else None
        async with self._bus.guard("XREADGROUP", max(remaining_s, 0.0) + OP_TIMEOUT_S):
            response = await self._bus.client.xreadgroup(
                self._group, self._name, {self._key: ">"}, count=count, block=block
            )
        if not response:
            return []
        streams = response.items() if isinstance(response, dict) else response
        out: list[tuple[Any, Any]] = []
        for _key, entries in streams:
            out.extend((entry[0], entry[1]) for entry in entries or ())
        return out

    async def _decode(
        self, entries: list[tuple[Any, Any]], deliveries: Callable[[str], int]
    ) -> list[Message]:
        messages: list[Message] = []
        discard: list[str] = []
        for msg_id, fields in entries:
            if msg_id is None:
                continue
            payload = decode_payload(fields.get(PAYLOAD_FIELD)) if fields else None
            if payload is None:
                if fields is not None:
                    _log.warning(
                        "bus: skipping malformed entry %s in %s (not a JSON object in %r)",
                        msg_id,
                        self._key,
                        PAYLOAD_FIELD,
                    )
                discard.append(str(msg_id))
                continue
            messages.append(Message(str(msg_id), self._topic, payload, deliveries(str(msg_id))))
        if discard:
            await self.ack(*discard)
        return messages

    async def ack(self, *ids: str) -> None:
        """XACK ``ids`` for this group (ids that are not stream ids are ignored)."""
        valid = [i for i in ids if _is_stream_id(i)]
        if not valid:
            return
        if self._bus.closed:
            return  # shutting down: the messages stay pending and are reclaimed later
        async with self._bus.guard("XACK"):
            await self._bus.client.xack(self._key, self._group, *valid)

    async def reclaim(self, min_idle_s: float, max_count: int = 100) -> list[Message]:
        """XAUTOCLAIM pending messages idle for at least ``min_idle_s``."""
        if self._bus.closed:
            return []
        await self._ensure_group()
        try:
            claimed = await self._autoclaim(max(0, int(min_idle_s * 1000)), max_count)
            counts = await self._deliveries([str(i) for i, f in claimed if i is not None])
        except BusError as exc:
            if self._lost_group(exc):
                return []
            raise
        return await self._decode(claimed, lambda msg_id: counts.get(msg_id, 2))

    async def _autoclaim(self, min_idle_ms: int, max_count: int) -> list[tuple[Any, Any]]:
        claimed: list[tuple[Any, Any]] = []
        cursor = "0-0"
        async with self._bus.guard("XAUTOCLAIM"):
            while len(claimed) < max_count:
                response = await self._bus.client.xautoclaim(
                    self._key,
                    self._group,
                    self._name,
                    min_idle_time=min_idle_ms,
                    start_id=cursor,
                    count=max_count - len(claimed),
                )
                cursor = str(response[0])
                claimed.extend(response[1] or ())
                if cursor == "0-0":
                    break
        return claimed

    async def _deliveries(self, ids: list[str]) -> dict[str, int]:
        """Delivery counts of this consumer's pending ``ids`` (XPENDING)."""
        if not ids:
            return {}
        ordered = sorted(ids, key=parse_id)
        async with self._bus.guard("XPENDING"):
            rows = await self._bus.client.xpending_range(
                self._key,
                self._group,
                min=ordered[0],
                max=ordered[-1],
                count=len(ids) + 1000,
                consumername=self._name,
            )
        wanted = set(ids)
        return {
            str(r["message_id"]): int(r["times_delivered"])
            for r in rows
            if str(r["message_id"]) in wanted
        }


def _is_stream_id(text: str) -> bool:
    try:
        parse_id(text)
    except ValueError:
        return False
    return True
