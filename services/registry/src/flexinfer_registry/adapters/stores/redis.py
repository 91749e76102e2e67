"""The Redis stores, laid out as the ModelExpress server lays them out.

Models: one hash per model at ``{prefix}model:{name}`` (provider, status, created_at,
last_used_at, updated_at as RFC 3339, optional message). Sources: an index hash per source
at ``{prefix}source:{id}`` (``__attributes__`` = SourceIdentity JSON, ``{worker_id}`` =
presence marker) and one hash per worker at ``{prefix}source:{id}:{worker_id}``. Every
write is one Lua script (see ``redis_scripts``); listings are SCAN + pipelined HGETALL,
with no secondary index to keep consistent. ``prefix`` defaults to ModelExpress's ``mx:``;
tests and parallel stacks give each their own.
"""

from __future__ import annotations

import builtins
import json
import logging
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any, cast

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from flexinfer_common.errors import InvalidSpecError, StoreError
from flexinfer_common.mx_identity import SourceIdentity
from flexinfer_registry.adapters.stores import redis_scripts as lua
from flexinfer_registry.adapters.stores.rfc3339 import format_ts, parse_ts
from flexinfer_registry.core.records import (
    ModelRecord,
    ModelStatus,
    Provider,
    SourceQuery,
    SourceRecord,
    SourceStatus,
    source_sort_key,
)
from flexinfer_registry.core.store import (
    MATCH_WINDOW_S,
    ModelRegistryStore,
    SourceStore,
    Stores,
)
from flexinfer_registry.settings import RegistrySettings

log = logging.getLogger(__name__)

DEFAULT_PREFIX = "mx:"
ATTRIBUTES = "__attributes__"
_SCAN_COUNT = 500
_GLOB_SPECIAL = str.maketrans({c: "\\" + c for c in "*?[]\\"})


@contextmanager
def _redis_errors(what: str) -> Iterator[None]:
    """Translate redis-py errors into StoreError."""
    try:
        yield
    except RedisError as exc:
        raise StoreError(f"redis {what} failed: {exc}") from exc


def _connect(url: str) -> aioredis.Redis:
    # Bytes, not str: worker metadata is binary; text fields are decoded where read.
    return aioredis.Redis.from_url(url, decode_responses=False, health_check_interval=30)


class _RedisStore:
    """The client, key prefix and idempotent close both stores share."""

    def __init__(self, client: aioredis.Redis, prefix: str) -> None:
        self._client = client
        self._prefix = prefix
        self._closed = False

    async def ping(self) -> None:
        """Fail fast (StoreError) when Redis cannot be reached."""
        with _redis_errors("ping"):
            await self._client.ping()

    async def close(self) -> None:
        """Release the connection pool; idempotent."""
        if not self._closed:
            self._closed = True
            await self._client.aclose()

    async def _scan(self, pattern_tail: str) -> AsyncIterator[str]:
        pattern = self._prefix.translate(_GLOB_SPECIAL) + pattern_tail
        with _redis_errors("scan"):
            async for key in self._client.scan_iter(match=pattern, count=_SCAN_COUNT):
                yield key.decode()


class RedisModelStore(_RedisStore, ModelRegistryStore):
    """Cached-model hashes at ``{prefix}model:{name}``."""

    def __init__(self, client: aioredis.Redis, prefix: str = DEFAULT_PREFIX) -> None:
        super().__init__(client, prefix)
        self._claim = client.register_script(lua.CLAIM_MODEL)
        self._set_status = client.register_script(lua.SET_MODEL_STATUS)
        self._touch = client.register_script(lua.TOUCH_MODEL)
        self._delete_if = client.register_script(lua.DELETE_MODEL_IF)

    @classmethod
    def from_url(cls, url: str, prefix: str = DEFAULT_PREFIX) -> RedisModelStore:
        """A store on its own connection pool to ``url``."""
        return cls(_connect(url), prefix)

    def key(self, name: str) -> str:
        """The hash key of model ``name``."""
        return f"{self._prefix}model:{name}"

    async def get(self, name: str) -> ModelRecord | None:
        """The record for ``name``, or None."""
        with _redis_errors("HGETALL"):
            fields = cast(dict[bytes, bytes], await self._client.hgetall(self.key(name)))
        return _model_record(name, fields) if fields else None

    async def try_claim(
        self, name: str, provider: Provider, *, now: float, stale_after: float | None = None
    ) -> bool:
        """HSETNX status DOWNLOADING, or an atomic retry/takeover (see CLAIM_MODEL)."""
        cutoff = "" if stale_after is None else format_ts(now - stale_after)
        with _redis_errors("claim"):
            won = await self._claim(
                keys=[self.key(name)], args=[provider.name, format_ts(now), cutoff]
            )
        return bool(won)

    async def set_status(
        self,
        name: str,
        provider: Provider,
        status: ModelStatus,
        message: str | None,
        *,
        now: float,
    ) -> None:
        """Upsert status/provider/message atomically; created_at is kept (HSETNX)."""
        args = [status.name, provider.name, format_ts(now), "0" if message is None else "1"]
        with _redis_errors("set_status"):
            await self._set_status(keys=[self.key(name)], args=[*args, message or ""])

    async def touch(self, name: str, *, now: float) -> bool:
        """last_used_at = now, only if the record exists."""
        with _redis_errors("touch"):
            return bool(await self._touch(keys=[self.key(name)], args=[format_ts(now)]))

    async def delete(self, name: str) -> bool:
        """DEL the hash; True if it existed."""
        with _redis_errors("DEL"):
            return bool(await self._client.delete(self.key(name)))

    async def delete_if(self, name: str, status: ModelStatus, updated_at: float) -> bool:
        """DEL only if status and updated_at still match (DELETE_MODEL_IF, atomic)."""
        window = [format_ts(updated_at - MATCH_WINDOW_S), format_ts(updated_at + MATCH_WINDOW_S)]
        with _redis_errors("delete_if"):
            done = await self._delete_if(keys=[self.key(name)], args=[status.name, *window])
        return bool(done)

    async def list_by_last_used(self, limit: int | None = None) -> list[ModelRecord]:
        """SCAN + pipelined HGETALL, sorted by (last_used_at, name)."""
        records = [r async for r in self._all()]
        records.sort(key=lambda r: (r.last_used_at, r.name))
        return records if limit is None else records[: max(0, limit)]

    async def status_counts(self) -> dict[ModelStatus, int]:
        """SCAN + pipelined HGET status, tallied here."""
        keys = [k async for k in self._scan("model:*")]
        with _redis_errors("HGET"):
            async with self._client.pipeline(transaction=False) as pipe:
                for key in keys:
                    pipe.hget(key, "status")
                statuses = await pipe.execute()
        counts: Counter[ModelStatus] = Counter()
        for key, raw in zip(keys, statuses, strict=True):
            if raw is None:
                continue  # deleted between SCAN and HGET
            try:
                counts[ModelStatus[raw.decode()]] += 1
            except KeyError:
                log.warning("redis key %s has an unknown status %r; skipped", key, raw)
        return dict(counts)

    async def _all(self) -> AsyncIterator[ModelRecord]:
        keys = [k async for k in self._scan("model:*")]
        with _redis_errors("HGETALL"):
            async with self._client.pipeline(transaction=False) as pipe:
                for key in keys:
                    pipe.hgetall(key)
                hashes = await pipe.execute()
        start = len(self.key(""))
        for key, fields in zip(keys, hashes, strict=True):
            if not fields:
                continue  # deleted between SCAN and HGETALL
            try:
                yield _model_record(key[start:], fields)
            except StoreError as exc:
                log.warning("%s; skipped", exc)


def _text(fields: dict[bytes, bytes], name: str) -> str | None:
    raw = fields.get(name.encode())
    return None if raw is None else raw.decode()


def _model_record(name: str, fields: dict[bytes, bytes]) -> ModelRecord:
    try:
        created = _text(fields, "created_at")
        used = _text(fields, "last_used_at") or created
        # ModelExpress's own records have no updated_at: last use is the best proxy.
        updated = _text(fields, "updated_at") or used
        if created is None or used is None or updated is None:
            raise KeyError("created_at")
        return ModelRecord(
            name=name,
            provider=Provider[_text(fields, "provider") or ""],
            status=ModelStatus[_text(fields, "status") or ""],
            created_at=parse_ts(created),
            last_used_at=parse_ts(used),
            updated_at=parse_ts(updated),
            message=_text(fields, "message"),
        )
    except (KeyError, ValueError) as exc:
        raise StoreError(f"redis record of model {name!r} is malformed: {exc!r}") from exc


class RedisSourceStore(_RedisStore, SourceStore):
    """P2P workers: ``{prefix}source:{id}`` index hashes plus one hash per worker."""

    def __init__(self, client: aioredis.Redis, prefix: str = DEFAULT_PREFIX) -> None:
        super().__init__(client, prefix)
        self._publish = client.register_script(lua.PUBLISH_SOURCE)
        self._update = client.register_script(lua.UPDATE_SOURCE_STATUS)
        self._mark = client.register_script(lua.MARK_SOURCE_STALE)
        self._gc = client.register_script(lua.GC_SOURCE)

    @classmethod
    def from_url(cls, url: str, prefix: str = DEFAULT_PREFIX) -> RedisSourceStore:
        """A store on its own connection pool to ``url``."""
        return cls(_connect(url), prefix)

    def index_key(self, mx_source_id: str) -> str:
        """The index hash of one source."""
        if ":" in mx_source_id:
            # The key layout cannot tell "a:b" + worker "c" from "a" + worker "b:c".
            raise InvalidSpecError("mx_source_id must not contain ':'", field="mx_source_id")
        return f"{self._prefix}source:{mx_source_id}"

    def worker_key(self, mx_source_id: str, worker_id: str) -> str:
        """The hash of one worker."""
        return f"{self.index_key(mx_source_id)}:{worker_id}"

    async def publish(self, record: SourceRecord) -> None:
        """Write index and worker hash in one script, replacing the worker wholly."""
        if record.worker_id == ATTRIBUTES:
            raise InvalidSpecError(f"worker_id {ATTRIBUTES!r} is reserved", field="worker_id")
        identity = json.dumps(record.identity.to_dict(), sort_keys=True, ensure_ascii=False)
        keys = [self.index_key(record.mx_source_id), self.worker_key(*_ids(record))]
        args: list[str | bytes] = [identity, record.worker_id]
        for field, value in _worker_fields(record).items():
            args += [field, value]
        with _redis_errors("publish"):
            await self._publish(keys=keys, args=args)

    async def get(self, mx_source_id: str, worker_id: str) -> SourceRecord | None:
        """Worker hash and identity read in one MULTI, so both are of one moment."""
        if ":" in mx_source_id:
            return None
        with _redis_errors("get"):
            async with self._client.pipeline(transaction=True) as pipe:
                pipe.hgetall(self.worker_key(mx_source_id, worker_id))
                pipe.hget(self.index_key(mx_source_id), ATTRIBUTES)
                fields, attributes = await pipe.execute()
        if not fields or attributes is None:
            return None
        return _source_record(mx_source_id, worker_id, _identity(attributes), fields)

    async def worker_ids(self, mx_source_id: str) -> builtins.set[str]:
        """The index hash's worker fields (HKEYS), without reading any worker's metadata."""
        if ":" in mx_source_id:
            return set()
        with _redis_errors("worker_ids"):
            keys = await self._client.hkeys(self.index_key(mx_source_id))
        names = {k.decode() if isinstance(k, bytes) else str(k) for k in keys}
        return names - {ATTRIBUTES}

    async def list(self, query: SourceQuery) -> list[SourceRecord]:
        """Index hashes first (identity, workers), then the workers' hashes, pipelined."""
        if query.mx_source_id is not None:
            if ":" in query.mx_source_id:
                return []
            source_ids = [query.mx_source_id]
        else:
            source_ids = [sid async for sid in self._source_ids()]
        found = [r for r in await self._load(source_ids, query.model_name) if query.matches(r)]
        found.sort(key=source_sort_key)
        return found if query.limit is None else found[: max(0, query.limit)]

    async def update_status(
        self,
        mx_source_id: str,
        worker_id: str,
        status: SourceStatus,
        source_load: float | None,
        *,
        now: float,
    ) -> bool:
        """Update-only status, updated_at and (when given) source_load."""
        if ":" in mx_source_id:
            return False
        load = "" if source_load is None else repr(float(source_load))
        with _redis_errors("update_status"):
            done = await self._update(
                keys=[self.worker_key(mx_source_id, worker_id)],
                args=[status.name, format_ts(now), load],
            )
        return bool(done)

    async def mark_stale(self, heartbeat_timeout: float, *, now: float) -> int:
        """STALE for every silent worker; each decided atomically by MARK_SOURCE_STALE."""
        cutoff = format_ts(now - heartbeat_timeout)
        marked = 0
        for record in await self.list(SourceQuery()):
            if record.status == SourceStatus.STALE or record.updated_at >= now - heartbeat_timeout:
                continue
            with _redis_errors("mark_stale"):
                marked += int(
                    await self._mark(keys=[self.worker_key(*_ids(record))], args=[cutoff])
                )
        return marked

    async def gc(self, stale_age: float, *, now: float) -> int:
        """Delete old STALE workers (and emptied indexes); each decided by GC_SOURCE."""
        cutoff = format_ts(now - stale_age)
        deleted = 0
        query = SourceQuery(status=SourceStatus.STALE)
        for record in await self.list(query):
            if record.updated_at >= now - stale_age:
                continue
            keys = [self.worker_key(*_ids(record)), self.index_key(record.mx_source_id)]
            with _redis_errors("gc"):
                deleted += int(await self._gc(keys=keys, args=[cutoff, record.worker_id]))
        return deleted

    async def _source_ids(self) -> AsyncIterator[str]:
        start = len(self.index_key(""))
        async for key in self._scan("source:*"):
            tail = key[start:]
            if ":" not in tail:  # an index, not a worker hash
                yield tail

    async def _load(
        self, source_ids: builtins.list[str], model_name: str | None
    ) -> builtins.list[SourceRecord]:
        with _redis_errors("HGETALL"):
            async with self._client.pipeline(transaction=False) as pipe:
                for sid in source_ids:
                    pipe.hgetall(self.index_key(sid))
                indexes = await pipe.execute()
        wanted: builtins.list[tuple[str, str, SourceIdentity]] = []
        for sid, index in zip(source_ids, indexes, strict=True):
            attributes = index.pop(ATTRIBUTES.encode(), None)
            if attributes is None:
                continue
            identity = _identity(attributes)
            if model_name is None or identity.model_name == model_name:
                wanted += [(sid, worker.decode(), identity) for worker in index]
        with _redis_errors("HGETALL"):
            async with self._client.pipeline(transaction=False) as pipe:
                for sid, worker_id, _ in wanted:
                    pipe.hgetall(self.worker_key(sid, worker_id))
                hashes = await pipe.execute()
        return [
            _source_record(sid, worker_id, identity, fields)
            for (sid, worker_id, identity), fields in zip(wanted, hashes, strict=True)
            if fields  # presence marker without a hash: deleted in between
        ]


def _ids(record: SourceRecord) -> tuple[str, str]:
    return record.mx_source_id, record.worker_id


def _worker_fields(record: SourceRecord) -> dict[str, str | bytes]:
    fields: dict[str, str | bytes] = {
        "worker_rank": str(record.worker_rank),
        "status": record.status.name,
        "updated_at": format_ts(record.updated_at),
        "metadata": record.metadata,
        "accelerator": record.accelerator,
        "topology": json.dumps(record.topology, sort_keys=True, ensure_ascii=False),
        "pod_name": record.pod_name,
        "pod_uid": record.pod_uid,
        "pod_namespace": record.pod_namespace,
    }
    if record.source_load is not None:
        fields["source_load"] = repr(float(record.source_load))
    if record.training_step is not None:
        fields["training_step"] = str(record.training_step)
    if record.layout_signature is not None:
        fields["layout_signature"] = record.layout_signature
    return fields


def _identity(raw: bytes) -> SourceIdentity:
    try:
        data: Any = json.loads(raw)
        return SourceIdentity.from_dict(data)
    except (ValueError, TypeError) as exc:
        raise StoreError(f"redis source identity is malformed: {exc}") from exc


def _source_record(
    mx_source_id: str, worker_id: str, identity: SourceIdentity, fields: dict[bytes, bytes]
) -> SourceRecord:
    try:
        load = _text(fields, "source_load")
        step = _text(fields, "training_step")
        return SourceRecord(
            mx_source_id=mx_source_id,
            worker_id=worker_id,
            identity=identity,
            worker_rank=int(_text(fields, "worker_rank") or "0"),
            status=SourceStatus[_text(fields, "status") or ""],
            updated_at=parse_ts(_text(fields, "updated_at") or ""),
            metadata=fields.get(b"metadata", b""),
            accelerator=_text(fields, "accelerator") or "",
            topology=json.loads(_text(fields, "topology") or "{}"),
            source_load=None if load is None else float(load),
            training_step=None if step is None else int(step),
            layout_signature=_text(fields, "layout_signature"),
            pod_name=_text(fields, "pod_name") or "",
            pod_uid=_text(fields, "pod_uid") or "",
            pod_namespace=_text(fields, "pod_namespace") or "",
        )
    except (KeyError, ValueError) as exc:
        raise StoreError(
            f"redis record of worker {mx_source_id}/{worker_id} is malformed: {exc!r}"
        ) from exc


async def create_stores(settings: RegistrySettings) -> Stores:
    """Both stores on ``settings.redis_url`` (``store=redis``); fails fast when unreachable."""
    models = RedisModelStore.from_url(settings.redis_url, settings.redis_prefix)
    sources = RedisSourceStore.from_url(settings.redis_url, settings.redis_prefix)
    try:
        await models.ping()
    except StoreError:
        await models.close()
        await sources.close()
        raise
    return Stores(models=models, sources=sources)
