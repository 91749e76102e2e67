"""An EventBus on Redis streams, for the distributed mode (several processes, one Redis).

One stream per topic (``<prefix><topic>``), one JSON field per entry, Redis consumer groups
for fan-out and work sharing, XAUTOCLAIM for reclaim. The client's connection pool is
unbounded, so a consumer blocked in XREADGROUP holds only its own connection.

Groups are created when ``consumer()`` is called (in a background task, since that call is
synchronous); ``publish`` on the same bus first waits for those creations, so a consumer
made before a publish in the same process always sees that message.

Redis may restart without its data: consumers re-create their groups (``redis_consumer``)
and each bus re-publishes what it published within its replay window (``redis_replay``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import AsyncIterator, Awaitable, Mapping
from typing import Any, TypeVar
from urllib.parse import urlsplit

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import AuthenticationError, RedisError, ResponseError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from flexinfer_common.bus.base import HEALTH_TIMEOUT_S, Consumer, EventBus, validate_names
from flexinfer_common.bus.codec import encode_payload
from flexinfer_common.bus.redis_consumer import OP_TIMEOUT_S, PAYLOAD_FIELD, RedisConsumer
from flexinfer_common.bus.redis_replay import CHECK_INTERVAL_S, EPOCH_KEY, ReplayLog
from flexinfer_common.errors import BusError, ConfigError

__all__ = ["OP_TIMEOUT_S", "PAYLOAD_FIELD", "RedisBus", "RedisConsumer", "redis_location"]

T = TypeVar("T")

_log = logging.getLogger(__name__)


def redis_location(url: str) -> str:
    """``host:port/db`` of a redis:// URL, without credentials (for messages); ConfigError
    for a URL redis-py would misread: a bad port, or a path that is not a database number."""
    try:
        parts = urlsplit(url)
        port = parts.port or 6379
    except ValueError as exc:
        raise ConfigError(f"invalid bus URL: {exc}") from exc
    db = parts.path.strip("/") or "0"
    if not db.isdigit():
        raise ConfigError(f"invalid bus URL: the path {parts.path!r} is not a database number")
    return f"{parts.hostname or 'localhost'}:{port}/{db}"


class RedisBus(EventBus):
    """Topics as Redis streams; see ``flexinfer_common.bus.base`` for the semantics."""

    def __init__(
        self,
        client: Redis,
        *,
        prefix: str = "flexinfer:",
        retention: int = 10_000,
        replay_window_s: float = 60.0,
        where: str = "redis",
    ):
        if retention < 1:
            raise ValueError("retention must be at least 1")
        self._client = client
        self._prefix = prefix
        self._retention = retention
        self._where = where
        self._closed = asyncio.Event()
        self._creating: set[asyncio.Task[None]] = set()
        self._replay = ReplayLog(replay_window_s, retention)
        self._epoch: str | None = None
        self._recovering = asyncio.Lock()
        self._watcher: asyncio.Task[None] | None = None

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        prefix: str = "flexinfer:",
        retention: int = 10_000,
        replay_window_s: float = 60.0,
    ) -> RedisBus:
        """A bus on the Redis at ``url`` (redis://host:port/db or rediss://...)."""
        where = redis_location(url)
        try:
            client = Redis.from_url(
                url,
                decode_responses=True,
                encoding_errors="replace",  # a non-UTF-8 entry is skipped as malformed
                socket_timeout=None,  # fetches block longer than any fixed socket timeout
                socket_connect_timeout=5,
                # A pooled connection may be stale after a Redis restart: retry once or twice
                # quickly, then report BusError instead of redis-py's default ten retries.
                retry=Retry(ExponentialBackoff(cap=0.5, base=0.05), 2),
            )
        except ValueError as exc:
            raise ConfigError(f"invalid bus URL for {where}: {exc}") from exc
        return cls(
            client, prefix=prefix, retention=retention, replay_window_s=replay_window_s,
            where=where,
        )  # fmt: skip

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
            raise BusError(f"redis at {self._where} refused {what}: {exc}") from exc
        except (RedisConnectionError, RedisTimeoutError, OSError, TimeoutError) as exc:
            reason = str(exc) or type(exc).__name__
            raise BusError(f"redis at {self._where} unreachable during {what}: {reason}") from exc
        except RedisError as exc:
            raise BusError(f"redis at {self._where} failed during {what}: {exc}") from exc

    @property
    def client(self) -> Redis:
        """The redis.asyncio client."""
        return self._client

    async def ping(self, timeout_s: float = HEALTH_TIMEOUT_S) -> None:
        """PING within ``timeout_s``; ConfigError if Redis refuses this client outright."""
        if self.closed:
            raise BusError("the bus is closed")
        try:
            async with self.guard("PING", timeout_s):
                await self._client.ping()
        except BusError as exc:
            # Wrong credentials or an unknown database: no amount of waiting fixes those.
            if isinstance(exc.__cause__, AuthenticationError | ResponseError):
                raise ConfigError(str(exc)) from exc.__cause__
            raise

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
        msg_id, epoch = await self._append(topic, text)
        self._replay.add(topic, text, epoch)
        if epoch != self._epoch:
            try:
                await self._recover()
            except BusError as exc:
                # This event is in; the watcher re-publishes the rest once Redis answers.
                _log.warning("re-publishing after a redis restart failed (will retry): %s", exc)
        self._watch()
        return msg_id

    def _epoch_pipeline(self) -> Pipeline:
        """A pipeline that starts by reading the data set's epoch (creating it if missing)."""
        epoch_key = self.key(EPOCH_KEY)
        pipe = self._client.pipeline(transaction=False)
        pipe.set(epoch_key, secrets.token_hex(8), nx=True)
        pipe.get(epoch_key)
        return pipe

    async def _append(self, topic: str, text: str) -> tuple[str, str]:
        """XADD ``text``, in one round trip with the epoch of the data set that took it."""
        async with self.guard("XADD"):
            pipe = self._epoch_pipeline()
            pipe.xadd(
                self.key(topic), {PAYLOAD_FIELD: text}, maxlen=self._retention, approximate=True
            )
            _, epoch, msg_id = await pipe.execute()
        return str(msg_id), str(epoch)

    async def _current_epoch(self) -> str:
        async with self.guard("GET epoch"):
            _, epoch = await self._epoch_pipeline().execute()
        return str(epoch)

    async def _recover(self) -> None:
        """Publish again what other data sets than the current one accepted in the window."""
        async with self._recovering:
            # Asked now, under the lock: a publish that raced a restart may report either.
            epoch = await self._current_epoch()
            known, self._epoch = self._epoch, epoch
            stale = self._replay.stale(epoch)
            if not stale:
                return
            _log.warning(
                "redis at %s lost its data (epoch %s, was %s): re-publishing %d events",
                self._where, epoch, known, len(stale),
            )  # fmt: skip
            for sent in stale:
                _, sent.epoch = await self._append(sent.topic, sent.text)

    def _watch(self) -> None:
        """Start the epoch watcher, once: a restart is noticed even if we publish no more."""
        if self._watcher is None and self._replay.window_s > 0:
            self._watcher = asyncio.create_task(self._watch_epoch(), name="bus-epoch-watch")

    async def _watch_epoch(self) -> None:
        while True:  # until close() cancels it
            await self._replay.wait_nonempty()
            await asyncio.sleep(CHECK_INTERVAL_S)
            try:
                if self._replay.stale(await self._current_epoch()):
                    await self._recover()
            except BusError as exc:
                _log.debug("bus epoch check failed (retrying): %s", exc)

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
        background = list(self._creating)
        if self._watcher is not None:
            background.append(self._watcher)
        for task in background:
            task.cancel()
        await asyncio.gather(*background, return_exceptions=True)
        await asyncio.sleep(0)  # let fetches see the close and cancel their reads
        with contextlib.suppress(RedisError, OSError):
            await self._client.aclose()


def _retrieve(task: asyncio.Task[None]) -> None:
    """Mark a creation task's failure as seen; the consumer retries the creation itself."""
    if not task.cancelled():
        task.exception()
