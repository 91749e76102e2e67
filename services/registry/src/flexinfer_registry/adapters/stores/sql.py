"""The SQL stores (SQLite or PostgreSQL) on SQLAlchemy Core, sharing libs/common's engines.

Each write is one statement in one transaction, so it is atomic for every replica: the
claim is ``INSERT ... ON CONFLICT DO UPDATE ... WHERE <claimable>`` (a new row, or the
conditional overwrite of an ERROR / abandoned DOWNLOADING row), and the row came back from
``RETURNING`` only for the one caller that wrote it. The sync engine runs in worker threads.
"""

from __future__ import annotations

import builtins
import contextlib
import functools
import threading
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import anyio.to_thread
from sqlalchemy import Engine, delete, func, select, update
from sqlalchemy.exc import SQLAlchemyError

from flexinfer_common.errors import FlexInferError, StoreError
from flexinfer_common.settings import StoreSettings
from flexinfer_common.store.sql_engine import build_engine, create_tables, ensure_schema, upsert
from flexinfer_registry.adapters.stores import sql_schema as schema
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

T = TypeVar("T")
_M = schema.MODELS.c
_W = schema.WORKERS.c


class _SqlStore:
    """Engine, lazy schema creation, thread hand-off and error translation."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._schema_ready = False
        self._schema_lock = threading.Lock()
        self._closed = False
        # SQLite has one writer anyway; serialising a store's own calls also keeps the
        # in-memory database's single shared connection to one thread at a time.
        sqlite = engine.dialect.name == "sqlite"
        self._op_lock: contextlib.AbstractContextManager[Any] = (
            threading.Lock() if sqlite else contextlib.nullcontext()
        )

    @property
    def engine(self) -> Engine:
        """The underlying SQLAlchemy engine."""
        return self._engine

    async def close(self) -> None:
        """Dispose of the engine's pool; idempotent."""
        if not self._closed:
            self._closed = True
            await anyio.to_thread.run_sync(self._engine.dispose)

    def _ensure_schema(self) -> None:
        with self._schema_lock:
            if not self._schema_ready:
                ensure_schema(self._engine, lambda conn: create_tables(conn, schema.METADATA))
                self._schema_ready = True

    def _run(self, fn: Callable[..., T], *args: Any) -> T:
        with self._op_lock:
            try:
                self._ensure_schema()
                return fn(*args)
            except FlexInferError:
                raise
            except SQLAlchemyError as exc:
                reason = str(exc).splitlines()[0]
                raise StoreError(f"registry SQL store failed: {reason}") from exc

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        return await anyio.to_thread.run_sync(functools.partial(self._run, fn, *args))


class SqlModelStore(_SqlStore, ModelRegistryStore):
    """Cached-model rows in ``mx_models``."""

    @classmethod
    def from_url(cls, url: str) -> SqlModelStore:
        """A store with its own engine on ``url`` (sqlite:///path or postgresql+psycopg://)."""
        return cls(build_engine(StoreSettings(url=url)))

    async def get(self, name: str) -> ModelRecord | None:
        """The record for ``name``, or None."""
        return await self._call(self._get, name)

    def _get(self, name: str) -> ModelRecord | None:
        with self._engine.connect() as conn:
            row = conn.execute(select(schema.MODELS).where(_M.name == name)).first()
        return None if row is None else schema.model_record(dict(row._mapping))

    async def try_claim(
        self, name: str, provider: Provider, *, now: float, stale_after: float | None = None
    ) -> bool:
        """One INSERT ... ON CONFLICT DO UPDATE WHERE claimable; True if this call wrote."""
        return await self._call(self._claim, name, provider, now, stale_after)

    def _claim(self, name: str, provider: Provider, now: float, stale_after: float | None) -> bool:
        claimable = _M.status == ModelStatus.ERROR.name
        if stale_after is not None:
            abandoned = (_M.status == ModelStatus.DOWNLOADING.name) & (
                _M.updated_at < now - stale_after
            )
            claimable = claimable | abandoned
        insert = upsert(self._engine, schema.MODELS).values(
            name=name,
            provider=provider.name,
            status=ModelStatus.DOWNLOADING.name,
            created_at=now,
            last_used_at=now,
            updated_at=now,
            message=None,
        )
        stmt = insert.on_conflict_do_update(
            index_elements=[_M.name],
            set_={
                "status": ModelStatus.DOWNLOADING.name,
                "provider": provider.name,
                "last_used_at": now,
                "updated_at": now,
                "message": None,
            },
            where=claimable,
        ).returning(_M.name)
        with self._engine.begin() as conn:
            return conn.execute(stmt).first() is not None

    async def set_status(
        self,
        name: str,
        provider: Provider,
        status: ModelStatus,
        message: str | None,
        *,
        now: float,
    ) -> None:
        """Upsert status/provider/message; created_at is only written by the INSERT."""
        await self._call(self._set_status, name, provider, status, message, now)

    def _set_status(
        self, name: str, provider: Provider, status: ModelStatus, message: str | None, now: float
    ) -> None:
        values = {
            "provider": provider.name,
            "status": status.name,
            "last_used_at": now,
            "updated_at": now,
            "message": message,
        }
        insert = upsert(self._engine, schema.MODELS).values(name=name, created_at=now, **values)
        stmt = insert.on_conflict_do_update(index_elements=[_M.name], set_=values)
        with self._engine.begin() as conn:
            conn.execute(stmt)

    async def touch(self, name: str, *, now: float) -> bool:
        """UPDATE last_used_at; True if the row exists."""
        stmt = update(schema.MODELS).where(_M.name == name).values(last_used_at=now)
        return await self._call(self._changed, stmt)

    async def delete(self, name: str) -> bool:
        """DELETE the row; True if it existed."""
        return await self._call(self._changed, delete(schema.MODELS).where(_M.name == name))

    async def delete_if(self, name: str, status: ModelStatus, updated_at: float) -> bool:
        """One conditional DELETE: the row goes only if status and updated_at still match."""
        stmt = delete(schema.MODELS).where(
            _M.name == name,
            _M.status == status.name,
            _M.updated_at >= updated_at - MATCH_WINDOW_S,
            _M.updated_at <= updated_at + MATCH_WINDOW_S,
        )
        return await self._call(self._changed, stmt)

    def _changed(self, stmt: Any) -> bool:
        with self._engine.begin() as conn:
            return bool(conn.execute(stmt).rowcount)

    async def list_by_last_used(self, limit: int | None = None) -> list[ModelRecord]:
        """Least recently used first, ties by name (sorted here: collations differ)."""
        records = await self._call(self._all)
        records.sort(key=lambda r: (r.last_used_at, r.name))
        return records if limit is None else records[: max(0, limit)]

    def _all(self) -> builtins.list[ModelRecord]:
        with self._engine.connect() as conn:
            rows = conn.execute(select(schema.MODELS)).all()
        return [schema.model_record(dict(r._mapping)) for r in rows]

    async def status_counts(self) -> dict[ModelStatus, int]:
        """SELECT status, count(*) GROUP BY status."""
        return await self._call(self._counts)

    def _counts(self) -> dict[ModelStatus, int]:
        stmt = select(_M.status, func.count()).group_by(_M.status)
        with self._engine.connect() as conn:
            rows = conn.execute(stmt).all()
        return {ModelStatus[status]: int(count) for status, count in rows}


class SqlSourceStore(_SqlStore, SourceStore):
    """P2P worker rows in ``mx_source_workers``."""

    @classmethod
    def from_url(cls, url: str) -> SqlSourceStore:
        """A store with its own engine on ``url``."""
        return cls(build_engine(StoreSettings(url=url)))

    async def publish(self, record: SourceRecord) -> None:
        """Upsert the worker's row, replacing every column."""
        await self._call(self._publish, record)

    def _publish(self, record: SourceRecord) -> None:
        values = schema.worker_row(record)
        insert = upsert(self._engine, schema.WORKERS).values(values)
        stmt = insert.on_conflict_do_update(
            index_elements=[_W.mx_source_id, _W.worker_id],
            set_={k: v for k, v in values.items() if k not in ("mx_source_id", "worker_id")},
        )
        with self._engine.begin() as conn:
            conn.execute(stmt)

    async def worker_ids(self, mx_source_id: str) -> builtins.set[str]:
        """SELECT worker_id WHERE mx_source_id = ..., without the metadata column."""
        return await self._call(self._worker_ids, mx_source_id)

    def _worker_ids(self, mx_source_id: str) -> builtins.set[str]:
        stmt = select(_W.worker_id).where(_W.mx_source_id == mx_source_id)
        with self._engine.connect() as conn:
            return {str(row[0]) for row in conn.execute(stmt).all()}

    async def list(self, query: SourceQuery) -> list[SourceRecord]:
        """Filtered in SQL, ordered and cut here (collation-independent)."""
        found = await self._call(self._select, query)
        found.sort(key=source_sort_key)
        return found if query.limit is None else found[: max(0, query.limit)]

    def _select(self, query: SourceQuery) -> builtins.list[SourceRecord]:
        stmt = select(schema.WORKERS)
        if query.mx_source_id is not None:
            stmt = stmt.where(_W.mx_source_id == query.mx_source_id)
        if query.model_name is not None:
            stmt = stmt.where(_W.model_name == query.model_name)
        if query.status is not None:
            stmt = stmt.where(_W.status == query.status.name)
        if query.min_updated_at is not None:
            stmt = stmt.where(_W.updated_at >= query.min_updated_at)
        if query.worker_rank is not None:
            stmt = stmt.where(_W.worker_rank == query.worker_rank)
        with self._engine.connect() as conn:
            rows = conn.execute(stmt).all()
        return [schema.source_record(dict(r._mapping)) for r in rows]

    async def get(self, mx_source_id: str, worker_id: str) -> SourceRecord | None:
        """One worker's row, or None."""
        found = await self._call(self._select_one, mx_source_id, worker_id)
        return None if found is None else schema.source_record(found)

    def _select_one(self, mx_source_id: str, worker_id: str) -> Mapping[str, Any] | None:
        stmt = select(schema.WORKERS).where(
            _W.mx_source_id == mx_source_id, _W.worker_id == worker_id
        )
        with self._engine.connect() as conn:
            row = conn.execute(stmt).first()
        return None if row is None else dict(row._mapping)

    async def update_status(
        self,
        mx_source_id: str,
        worker_id: str,
        status: SourceStatus,
        source_load: float | None,
        *,
        now: float,
    ) -> bool:
        """UPDATE status/updated_at (and source_load when given); False if no such worker."""
        values: dict[str, Any] = {"status": status.name, "updated_at": now}
        if source_load is not None:
            values["source_load"] = float(source_load)
        stmt = (
            update(schema.WORKERS)
            .where(_W.mx_source_id == mx_source_id, _W.worker_id == worker_id)
            .values(values)
        )
        return await self._call(self._count, stmt) > 0

    async def mark_stale(self, heartbeat_timeout: float, *, now: float) -> int:
        """One UPDATE: the cut-off is checked by the database, row by row, atomically."""
        stmt = (
            update(schema.WORKERS)
            .where(_W.status != SourceStatus.STALE.name, _W.updated_at < now - heartbeat_timeout)
            .values(status=SourceStatus.STALE.name)
        )
        return await self._call(self._count, stmt)

    async def gc(self, stale_age: float, *, now: float) -> int:
        """One DELETE of the STALE rows older than the cut-off."""
        stmt = delete(schema.WORKERS).where(
            _W.status == SourceStatus.STALE.name, _W.updated_at < now - stale_age
        )
        return await self._call(self._count, stmt)

    def _count(self, stmt: Any) -> int:
        with self._engine.begin() as conn:
            return int(conn.execute(stmt).rowcount)


async def create_stores(settings: RegistrySettings) -> Stores:
    """Both stores on ``settings.sql_url`` (``store=sql``)."""
    return Stores(
        models=SqlModelStore.from_url(settings.sql_url),
        sources=SqlSourceStore.from_url(settings.sql_url),
    )
