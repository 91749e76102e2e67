"""An EventBus on Redis streams, for the distributed mode (several processes, one Redis).

One stream per topic (``<prefix><topic>``), one JSON field per entry, Redis consumer groups
for fan-out and work sharing, XAUTOCLAIM for reclaim. The client's connection pool is
unbounded, so a consumer blocked in XREADGROUP holds only its own connection.

Groups are created when ``consumer()`` is called (in a background task, since that call is
synchronous); ``publish`` on the same bus first waits for those creations, so a consumer
made before a publish in the same process always sees that message.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, TypeVar

from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from flexinfer_common.bus.base import Consumer, EventBus, Message, validate_names
from flexinfer_common.bus.codec import decode_payload, encode_payload
from flexinfer_common.bus.memory import parse_id
from flexinfer_common.errors import BusError

T = TypeVar("T")

PAYLOAD_FIELD = "payload"
"""The stream entry field that holds the event's JSON text."""

OP_TIMEOUT_S = 10.0
"""Upper bound on one Redis round trip (beyond a fetch's own wait): long enough for a busy
server, short enough that a hung connection surfaces as BusError rather than a stall."""

_log = logging.getLogger(__name__)


class RedisBus(EventBus):
    """Topics as Redis streams; see ``flexinfer_common.bus.base`` for the semantics."""

    def __init__(self, client: Redis, *, prefix: str = "flexinfer:", retention: int = 10_000):
        if retention < 1:
            raise ValueError("retention must be at least 1")
        self._client = client
        self._prefix = prefix
        self._retention = retention
        self._closed = asyncio.Event()
        self._creating: set[asyncio.Task[None]] = set()

    @classmethod
    def from_url(cls, url: str, *, prefix: str = "flexinfer:", retention: int = 10_000) -> RedisBus:
        """A bus on the Redis at ``url`` (redis://host:port/db or rediss://...)."""
        client = Redis.from_url(
            url,
            decode_responses=True,
            encoding_errors="replace",  # a non-UTF-8 entry is skipped as malformed, not fatal
            socket_timeout=None,  # fetches block longer than any fixed socket timeout
            socket_connect_timeout=5,
            # A pooled connection may be stale after a Redis restart: retry once or twice
            # quickly, then report BusError instead of redis-py's default ten retries.
            retry=Retry(ExponentialBackoff(cap=0.5, base=0.05), 2),
        )
        return cls(client, prefix=prefix, retention=retention)

    @property
    def closed(self) -> bool:
        """True once ``close`` ran."""
        return self._closed.is_set()

    def key(self, topic: str) -> str:
        """The Redis key of ``topic``'s stream."""
        return f"{self._prefix}{topic}"

    @contextlib.asynccontextmanager
    async def guard(self, what: str, timeout_s: float = OP_TIMEOUT_S) -> AsyncIterator[None]:
        """Bound a Redis call in time and translate its failures into BusError."""
        try:
            async with asyncio.timeout(timeout_s):
                yield
        except ResponseError as exc:
            raise BusError(f"redis refused {what}: {exc}") from exc
        except (RedisConnectionError, RedisTimeoutError, OSError, TimeoutError) as exc:
            raise BusError(f"redis unreachable during {what}: {exc or type(exc).__name__}") from exc
        except RedisError as exc:
            raise BusError(f"redis failed during {what}: {exc}") from exc

    @property
    def client(self) -> Redis:
        """The redis.asyncio client."""
        return self._client

    async def publish(self, topic: str, payload: Mapping[str, Any]) -> str:
        """Append ``payload`` to ``topic`` (XADD, MAXLEN ~ retention); return the id."""
        validate_names(topic)
        text = encode_payload(payload)
        if self.closed:
            raise BusError("the bus is closed")
        if self._creating:
            # Groups made by consumer() before this publish must exist before XADD.
            # (wait, not gather: cancelling this publish must not cancel the creations.)
            await asyncio.wait(set(self._creating))
        async with self.guard("XADD"):
            msg_id = await self._client.xadd(
                self.key(topic),
                {PAYLOAD_FIELD: text},
                maxlen=self._retention,
                approximate=True,
            )
        return str(msg_id)

    async def create_group(self, key: str, group: str, start: str) -> None:
        """XGROUP CREATE ... MKSTREAM, treating an existing group as success."""
        try:
            async with self.guard("XGROUP CREATE"):
                await self._client.xgroup_create(key, group, id=start, mkstream=True)
        except BusError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    def _schedule(self, key: str, group: str, start: str) -> asyncio.Task[None] | None:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return None  # no loop yet: the consumer creates the group on first use
        task = asyncio.ensure_future(self.create_group(key, group, start))
        self._creating.add(task)
        task.add_done_callback(self._creating.discard)
        task.add_done_callback(_retrieve)
        return task

    def consumer(self, topic: str, group: str, name: str, *, from_start: bool = False) -> Consumer:
        """A consumer named ``name`` in ``group`` of ``topic``; the group is created now."""
        validate_names(topic, group, name)
        start = "0" if from_start else "$"
        key = self.key(topic)
        task = self._schedule(key, group, start)
        return RedisConsumer(self, topic, group, name, start=start, creation=task)

    async def until_closed(self, work: Awaitable[T]) -> T | None:
        """``work``'s result, or None if the bus is closed first (``work`` is cancelled)."""
        task = asyncio.ensure_future(work)
        closer = asyncio.ensure_future(self._closed.wait())
        try:
            await asyncio.wait({task, closer}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            closer.cancel()
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if task.cancelled():
            return None
        return task.result()

    async def close(self) -> None:
        """End pending fetches (they return []) and close the connection pool."""
        self._closed.set()
        for task in list(self._creating):
            task.cancel()
        await asyncio.gather(*list(self._creating), return_exceptions=True)
        await asyncio.sleep(0)  # let fetches see the close and cancel their reads
        with contextlib.suppress(RedisError, OSError):
            await self._client.aclose()


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


def _retrieve(task: asyncio.Task[None]) -> None:
    """Mark a creation task's failure as seen; the consumer retries the creation itself."""
    if not task.cancelled():
        task.exception()


def _is_stream_id(text: str) -> bool:
    try:
        parse_id(text)
    except ValueError:
        return False
    return True
