"""The ModelStore on SQLAlchemy: SQLite (embedded) or PostgreSQL (distributed).

The sync engine runs in worker threads (``anyio.to_thread``). Every write is one short
transaction that first bumps the global resource-version counter (taking the write lock,
so SQLite never has to upgrade a read lock) and then does a single compare-and-set
``UPDATE ... WHERE resource_version = :old``, so two writers, in one process or in two,
can never both win.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

import anyio.to_thread
import pydantic
from sqlalchemy import Connection, Engine, case, delete, select, update
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from flexinfer_common.api import Model, ModelStatus
from flexinfer_common.errors import ConflictError, FlexInferError, NotFoundError, StoreError
from flexinfer_common.settings import StoreSettings
from flexinfer_common.store import sql_schema as schema
from flexinfer_common.store.base import EndpointRecord, ModelStore
from flexinfer_common.store.sql_engine import build_engine, create_tables, ensure_schema, upsert

T = TypeVar("T")

_M = schema.MODELS.c
_E = schema.ENDPOINTS.c


class SqlModelStore(ModelStore):
    """Models and endpoints in SQL tables, created on first use."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._schema_ready = False
        self._schema_lock = threading.Lock()
        # SQLite has one writer at a time anyway; serialising a store's own calls avoids
        # sharing the in-memory database's single connection between threads at once.
        sqlite = engine.dialect.name == "sqlite"
        self._op_lock: contextlib.AbstractContextManager[Any] = (
            threading.Lock() if sqlite else contextlib.nullcontext()
        )

    @classmethod
    def from_settings(cls, settings: StoreSettings) -> SqlModelStore:
        """A store on ``settings.url`` (sqlite:///path, sqlite://, postgresql+psycopg://)."""
        return cls(build_engine(settings))

    @property
    def engine(self) -> Engine:
        """The underlying SQLAlchemy engine."""
        return self._engine

    # -- plumbing ---------------------------------------------------------------------

    def _ensure_schema(self) -> None:
        with self._schema_lock:
            if not self._schema_ready:
                ensure_schema(self._engine, self._create_schema)
                self._schema_ready = True

    def _create_schema(self, conn: Connection) -> None:
        create_tables(conn, schema.METADATA)
        stmt = upsert(self._engine, schema.COUNTERS).values(name=schema.RESOURCE_VERSION, value=0)
        conn.execute(stmt.on_conflict_do_nothing(index_elements=["name"]))

    def _run(self, fn: Callable[..., T], *args: Any) -> T:
        with self._op_lock:
            try:
                self._ensure_schema()
                return fn(*args)
            except FlexInferError:
                raise
            except IntegrityError as exc:
                raise ConflictError(f"store conflict: {_reason(exc)}") from exc
            except SQLAlchemyError as exc:
                raise StoreError(f"store unavailable: {_reason(exc)}") from exc
            except pydantic.ValidationError as exc:
                raise StoreError(f"stored object is invalid: {exc}") from exc

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        return await anyio.to_thread.run_sync(functools.partial(self._run, fn, *args))

    # -- models -----------------------------------------------------------------------

    async def create_model(self, model: Model) -> Model:
        """Insert a new Model (generation 1); ConflictError if the key exists."""
        return await self._call(self._create_model, model)

    def _create_model(self, model: Model) -> Model:
        spec = schema.dump(model.spec)
        values = {
            "namespace": model.metadata.namespace,
            "name": model.metadata.name,
            "uid": str(uuid.uuid4()),
            "generation": 1,
            "created_at": schema.now_utc(),
            "meta": schema.meta_json(model),
            "spec": spec,
            "spec_hash": schema.spec_hash(spec),
            "status": schema.dump(model.status),
        }
        try:
            with self._engine.begin() as conn:
                values["resource_version"] = _bump(conn)
                stmt = schema.MODELS.insert().values(values).returning(*schema.MODELS.c)
                row = conn.execute(stmt).one()
        except IntegrityError as exc:
            raise ConflictError(f"model {model.key} already exists") from exc
        return schema.row_to_model(dict(row._mapping))

    async def get_model(self, namespace: str, name: str) -> Model:
        """The Model, or NotFoundError."""
        return await self._call(self._get_model, namespace, name)

    def _get_model(self, namespace: str, name: str) -> Model:
        with self._engine.connect() as conn:
            stmt = select(schema.MODELS).where(_M.namespace == namespace, _M.name == name)
            row = conn.execute(stmt).first()
        if row is None:
            raise NotFoundError(f"model {namespace}/{name} not found")
        return schema.row_to_model(dict(row._mapping))

    async def list_models(self, namespace: str | None = None) -> list[Model]:
        """All Models, optionally of one namespace, ordered by key."""
        return await self._call(self._list_models, namespace)

    def _list_models(self, namespace: str | None) -> list[Model]:
        stmt = select(schema.MODELS)
        if namespace is not None:
            stmt = stmt.where(_M.namespace == namespace)
        with self._engine.connect() as conn:
            rows = conn.execute(stmt).all()
        # Sorted here, not by ORDER BY: "namespace/name" order must not depend on collation.
        return sorted((schema.row_to_model(dict(r._mapping)) for r in rows), key=lambda m: m.key)

    async def replace_model(self, model: Model) -> Model:
        """Replace labels/annotations and spec; bump generation when spec changed."""
        return await self._call(self._replace_model, model)

    def _replace_model(self, model: Model) -> Model:
        spec = schema.dump(model.spec)
        digest = schema.spec_hash(spec)
        values = {
            "meta": schema.meta_json(model),
            "spec": spec,
            "spec_hash": digest,
            "generation": case((_M.spec_hash == digest, _M.generation), else_=_M.generation + 1),
        }
        meta = model.metadata
        return self._compare_and_set(meta.namespace, meta.name, meta.resource_version, values)

    async def update_status(
        self, namespace: str, name: str, status: ModelStatus, resource_version: str | None = None
    ) -> Model:
        """Replace the status only; the same resource_version rule as replace_model."""
        values = {"status": schema.dump(status)}
        return await self._call(self._compare_and_set, namespace, name, resource_version, values)

    def _compare_and_set(
        self, namespace: str, name: str, expected: str | None, values: dict[str, Any]
    ) -> Model:
        key = f"{namespace}/{name}"
        old = _parse_version(key, expected)
        with self._engine.begin() as conn:
            stmt = update(schema.MODELS).where(_M.namespace == namespace, _M.name == name)
            if old is not None:
                stmt = stmt.where(_M.resource_version == old)
            stmt = stmt.values(**values, resource_version=_bump(conn))
            row = conn.execute(stmt.returning(*schema.MODELS.c)).first()
            if row is None:
                exists = conn.execute(
                    select(_M.resource_version).where(_M.namespace == namespace, _M.name == name)
                ).first()
                if exists is None:
                    raise NotFoundError(f"model {key} not found")
                raise ConflictError(
                    f"model {key} changed: resourceVersion {expected} is stale"
                    f" (now {exists[0]}); read it again and retry"
                )
        return schema.row_to_model(dict(row._mapping))

    async def delete_model(self, namespace: str, name: str) -> None:
        """Delete the Model and its endpoints; NotFoundError if absent."""
        await self._call(self._delete_model, namespace, name)

    def _delete_model(self, namespace: str, name: str) -> None:
        with self._engine.begin() as conn:
            result = conn.execute(
                delete(schema.MODELS).where(_M.namespace == namespace, _M.name == name)
            )
            if result.rowcount == 0:
                raise NotFoundError(f"model {namespace}/{name} not found")
            conn.execute(delete(schema.ENDPOINTS).where(_E.model == f"{namespace}/{name}"))

    # -- endpoints --------------------------------------------------------------------

    async def put_endpoint(self, record: EndpointRecord) -> None:
        """Insert or replace the endpoint (model, replica)."""
        await self._call(self._put_endpoint, record)

    def _put_endpoint(self, record: EndpointRecord) -> None:
        values = {
            "model": record.model,
            "replica": record.replica,
            "url": record.url,
            "ready": record.ready,
            "node": record.node,
            "updated_at": schema.to_utc(record.updated_at),
        }
        stmt = upsert(self._engine, schema.ENDPOINTS).values(values)
        stmt = stmt.on_conflict_do_update(
            index_elements=["model", "replica"],
            set_={k: v for k, v in values.items() if k not in ("model", "replica")},
        )
        with self._engine.begin() as conn:
            conn.execute(stmt)

    async def delete_endpoint(self, model: str, replica: str) -> None:
        """Remove the endpoint if present."""
        await self._call(self._delete_endpoint, model, replica)

    def _delete_endpoint(self, model: str, replica: str) -> None:
        with self._engine.begin() as conn:
            conn.execute(delete(schema.ENDPOINTS).where(_E.model == model, _E.replica == replica))

    async def list_endpoints(self, model: str | None = None) -> list[EndpointRecord]:
        """Endpoints of one model, or of all models, ordered by (model, replica)."""
        return await self._call(self._list_endpoints, model)

    def _list_endpoints(self, model: str | None) -> list[EndpointRecord]:
        stmt = select(schema.ENDPOINTS)
        if model is not None:
            stmt = stmt.where(_E.model == model)
        with self._engine.connect() as conn:
            rows = conn.execute(stmt).all()
        records = (schema.row_to_endpoint(dict(r._mapping)) for r in rows)
        return sorted(records, key=lambda r: (r.model, r.replica))

    async def close(self) -> None:
        """Dispose of pooled connections (an in-memory SQLite database is discarded)."""
        await anyio.to_thread.run_sync(self._engine.dispose)


def _bump(conn: Connection) -> int:
    """Take the next resource version (and, with it, the database's write lock)."""
    counters = schema.COUNTERS.c
    stmt = (
        update(schema.COUNTERS)
        .where(counters.name == schema.RESOURCE_VERSION)
        .values(value=counters.value + 1)
        .returning(counters.value)
    )
    return int(conn.execute(stmt).scalar_one())


def _parse_version(key: str, text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        raise ConflictError(f"model {key}: resourceVersion {text!r} is not one we issued") from None


def _reason(exc: SQLAlchemyError) -> str:
    orig = getattr(exc, "orig", None)
    text = str(orig if orig is not None else exc).strip().splitlines()
    return f"{type(orig or exc).__name__}: {text[0] if text else ''}"
