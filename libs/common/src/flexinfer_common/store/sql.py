"""The ModelStore on SQLAlchemy: SQLite (embedded) or PostgreSQL (distributed).

Models, LoRAAdapters and ModelCatalogs share one row layout and one set of queries.

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
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import anyio.to_thread
import pydantic
from sqlalchemy import Connection, Engine, Table, case, delete, select, update
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from flexinfer_common.api import (
    LoRAAdapter,
    LoRAAdapterStatus,
    Model,
    ModelCatalog,
    ModelCatalogStatus,
    ModelStatus,
)
from flexinfer_common.errors import ConflictError, FlexInferError, NotFoundError, StoreError
from flexinfer_common.settings import StoreSettings
from flexinfer_common.store import lifecycle
from flexinfer_common.store import sql_benchmarks as benchmarks
from flexinfer_common.store import sql_endpoints as endpoints
from flexinfer_common.store import sql_schema as schema
from flexinfer_common.store.base import BenchmarkRecord, EndpointRecord, ModelStore
from flexinfer_common.store.sql_engine import build_engine, create_tables, ensure_schema, upsert

T = TypeVar("T")
Row = Callable[[Mapping[str, Any]], T]
"""Turns a fetched row into the API object (runs inside the store call, so a corrupt row
becomes StoreError like every other failure)."""

_E = schema.ENDPOINTS.c
_ADAPTER = "loraadapter"
_CATALOG = "modelcatalog"
ApiObject = Model | LoRAAdapter | ModelCatalog


class SqlModelStore(ModelStore):
    """Models, LoRAAdapters and endpoints in SQL tables, created on first use."""

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

    async def open(self) -> None:
        """Create the database (PostgreSQL, when the role may) and the tables if missing."""
        await self._call(lambda: None)

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

    # -- objects (Models, LoRAAdapters): one row layout, one set of queries ---------------

    def _insert(self, table: Table, obj: ApiObject, what: str, out: Row[T]) -> T:
        spec = schema.dump(obj.spec)
        values = {
            "namespace": obj.metadata.namespace,
            "name": obj.metadata.name,
            "uid": str(uuid.uuid4()),
            "generation": 1,
            "created_at": schema.now_utc(),
            # A new object is never being deleted, whatever the client sent.
            "meta": lifecycle.replace_meta(obj.key, {}, schema.meta_json(obj)).meta,
            "spec": spec,
            "spec_hash": schema.spec_hash(spec),
            "status": schema.dump(obj.status),
        }
        try:
            with self._engine.begin() as conn:
                values["resource_version"] = _bump(conn)
                row = conn.execute(table.insert().values(values).returning(*table.c)).one()
        except IntegrityError as exc:
            raise ConflictError(f"{what} {obj.key} already exists") from exc
        return out(dict(row._mapping))

    def _select(self, table: Table, namespace: str, name: str, what: str, out: Row[T]) -> T:
        with self._engine.connect() as conn:
            stmt = select(table).where(table.c.namespace == namespace, table.c.name == name)
            row = conn.execute(stmt).first()
        if row is None:
            raise NotFoundError(f"{what} {namespace}/{name} not found")
        return out(dict(row._mapping))

    def _select_all(self, table: Table, namespace: str | None, out: Row[T]) -> list[T]:
        stmt = select(table)
        if namespace is not None:
            stmt = stmt.where(table.c.namespace == namespace)
        with self._engine.connect() as conn:
            rows = conn.execute(stmt).all()
        return [out(dict(r._mapping)) for r in rows]

    @staticmethod
    def _spec_values(table: Table, obj: ApiObject) -> dict[str, Any]:
        """The columns a replace writes; generation bumps only when the spec changed."""
        spec = schema.dump(obj.spec)
        digest = schema.spec_hash(spec)
        c = table.c
        return {
            "meta": schema.meta_json(obj),
            "spec": spec,
            "spec_hash": digest,
            "generation": case((c.spec_hash == digest, c.generation), else_=c.generation + 1),
        }

    def _cas(
        self,
        table: Table,
        what: str,
        namespace: str,
        name: str,
        expected: str | None,
        values: dict[str, Any],
        out: Row[T],
    ) -> T:
        key = f"{namespace}/{name}"
        old = _parse_version(what, key, expected)
        c = table.c
        where = (c.namespace == namespace, c.name == name)
        with self._engine.begin() as conn:
            version = _bump(conn)  # holds the write lock from here on
            current = conn.execute(select(c.resource_version, c.meta).where(*where)).first()
            if current is None:
                raise NotFoundError(f"{what} {key} not found")
            if old is not None and current.resource_version != old:
                raise ConflictError(
                    f"{what} {key} changed: resourceVersion {expected} is stale"
                    f" (now {current.resource_version}); read it again and retry"
                )
            finish = False
            if "meta" in values:
                write = lifecycle.replace_meta(f"{what} {key}", current.meta, values["meta"])
                values, finish = {**values, "meta": write.meta}, write.delete
            stmt = update(table).where(*where).values(**values, resource_version=version)
            row = conn.execute(stmt.returning(*table.c)).one()
            if finish:  # the last finalizer is gone: the deletion completes
                self._delete_rows(conn, table, namespace, name)
        return out(dict(row._mapping))

    def _delete(self, table: Table, what: str, namespace: str, name: str) -> None:
        c = table.c
        where = (c.namespace == namespace, c.name == name)
        with self._engine.begin() as conn:
            version = _bump(conn)
            current = conn.execute(select(c.meta).where(*where)).first()
            if current is None:
                raise NotFoundError(f"{what} {namespace}/{name} not found")
            stamped = lifecycle.delete_meta(current.meta)
            if stamped is None:
                self._delete_rows(conn, table, namespace, name)
            elif stamped != current.meta:  # finalizers hold it: mark it as being deleted
                stamp = update(table).where(*where).values(meta=stamped, resource_version=version)
                conn.execute(stamp)

    @staticmethod
    def _delete_rows(conn: Connection, table: Table, namespace: str, name: str) -> None:
        c = table.c
        conn.execute(delete(table).where(c.namespace == namespace, c.name == name))
        if table is schema.MODELS:
            conn.execute(delete(schema.ENDPOINTS).where(_E.model == f"{namespace}/{name}"))

    # -- models -----------------------------------------------------------------------

    async def create_model(self, model: Model) -> Model:
        """Insert a new Model (generation 1); ConflictError if the key exists."""
        return await self._call(self._insert, schema.MODELS, model, "model", schema.row_to_model)

    async def get_model(self, namespace: str, name: str) -> Model:
        """The Model, or NotFoundError."""
        args = (schema.MODELS, namespace, name, "model", schema.row_to_model)
        return await self._call(self._select, *args)

    async def list_models(self, namespace: str | None = None) -> list[Model]:
        """All Models, optionally of one namespace, ordered by key."""
        models = await self._call(self._select_all, schema.MODELS, namespace, schema.row_to_model)
        # Sorted here, not by ORDER BY: "namespace/name" order must not depend on collation.
        return sorted(models, key=lambda m: m.key)

    async def replace_model(self, model: Model) -> Model:
        """Replace labels/annotations and spec; bump generation when spec changed."""
        values = self._spec_values(schema.MODELS, model)
        meta = model.metadata
        return await self._model_cas(meta.namespace, meta.name, meta.resource_version, values)

    async def update_status(
        self, namespace: str, name: str, status: ModelStatus, resource_version: str | None = None
    ) -> Model:
        """Replace the status only; the same resource_version rule as replace_model."""
        values = {"status": schema.dump(status)}
        return await self._model_cas(namespace, name, resource_version, values)

    async def _model_cas(
        self, namespace: str, name: str, expected: str | None, values: dict[str, Any]
    ) -> Model:
        args = (schema.MODELS, "model", namespace, name, expected, values, schema.row_to_model)
        return await self._call(self._cas, *args)

    async def delete_model(self, namespace: str, name: str) -> None:
        """Delete the Model and its endpoints; NotFoundError if absent."""
        await self._call(self._delete, schema.MODELS, "model", namespace, name)

    # -- LoRA adapters ----------------------------------------------------------------

    async def create_adapter(self, adapter: LoRAAdapter) -> LoRAAdapter:
        """Insert a new LoRAAdapter (generation 1); ConflictError if the key exists."""
        args = (schema.ADAPTERS, adapter, _ADAPTER, schema.row_to_adapter)
        return await self._call(self._insert, *args)

    async def get_adapter(self, namespace: str, name: str) -> LoRAAdapter:
        """The LoRAAdapter, or NotFoundError."""
        args = (schema.ADAPTERS, namespace, name, _ADAPTER, schema.row_to_adapter)
        return await self._call(self._select, *args)

    async def list_adapters(self, namespace: str | None = None) -> list[LoRAAdapter]:
        """All LoRAAdapters, optionally of one namespace, ordered by key."""
        args = (schema.ADAPTERS, namespace, schema.row_to_adapter)
        adapters = await self._call(self._select_all, *args)
        return sorted(adapters, key=lambda a: a.key)

    async def replace_adapter(self, adapter: LoRAAdapter) -> LoRAAdapter:
        """Replace labels/annotations and spec; bump generation when spec changed."""
        values = self._spec_values(schema.ADAPTERS, adapter)
        meta = adapter.metadata
        return await self._adapter_cas(meta.namespace, meta.name, meta.resource_version, values)

    async def update_adapter_status(
        self,
        namespace: str,
        name: str,
        status: LoRAAdapterStatus,
        resource_version: str | None = None,
    ) -> LoRAAdapter:
        """Replace the status only; the same resource_version rule as replace_adapter."""
        values = {"status": schema.dump(status)}
        return await self._adapter_cas(namespace, name, resource_version, values)

    async def _adapter_cas(
        self, namespace: str, name: str, expected: str | None, values: dict[str, Any]
    ) -> LoRAAdapter:
        args = (schema.ADAPTERS, _ADAPTER, namespace, name, expected, values, schema.row_to_adapter)
        return await self._call(self._cas, *args)

    async def delete_adapter(self, namespace: str, name: str) -> None:
        """Delete the LoRAAdapter; NotFoundError if absent."""
        await self._call(self._delete, schema.ADAPTERS, _ADAPTER, namespace, name)

    # -- model catalogs ---------------------------------------------------------------

    async def create_catalog(self, catalog: ModelCatalog) -> ModelCatalog:
        """Insert a new ModelCatalog (generation 1); ConflictError if the key exists."""
        args = (schema.CATALOGS, catalog, _CATALOG, schema.row_to_catalog)
        return await self._call(self._insert, *args)

    async def get_catalog(self, namespace: str, name: str) -> ModelCatalog:
        """The ModelCatalog, or NotFoundError."""
        args = (schema.CATALOGS, namespace, name, _CATALOG, schema.row_to_catalog)
        return await self._call(self._select, *args)

    async def list_catalogs(self, namespace: str | None = None) -> list[ModelCatalog]:
        """All ModelCatalogs, optionally of one namespace, ordered by key."""
        args = (schema.CATALOGS, namespace, schema.row_to_catalog)
        return sorted(await self._call(self._select_all, *args), key=lambda c: c.key)

    async def replace_catalog(self, catalog: ModelCatalog) -> ModelCatalog:
        """Replace labels/annotations and spec; bump generation when spec changed."""
        values = self._spec_values(schema.CATALOGS, catalog)
        meta = catalog.metadata
        return await self._catalog_cas(meta.namespace, meta.name, meta.resource_version, values)

    async def update_catalog_status(
        self,
        namespace: str,
        name: str,
        status: ModelCatalogStatus,
        resource_version: str | None = None,
    ) -> ModelCatalog:
        """Replace the status only; the same resource_version rule as replace_catalog."""
        values = {"status": schema.dump(status)}
        return await self._catalog_cas(namespace, name, resource_version, values)

    async def _catalog_cas(
        self, namespace: str, name: str, expected: str | None, values: dict[str, Any]
    ) -> ModelCatalog:
        args = (schema.CATALOGS, _CATALOG, namespace, name, expected, values, schema.row_to_catalog)
        return await self._call(self._cas, *args)

    async def delete_catalog(self, namespace: str, name: str) -> None:
        """Delete the ModelCatalog; NotFoundError if absent."""
        await self._call(self._delete, schema.CATALOGS, _CATALOG, namespace, name)

    # -- endpoints --------------------------------------------------------------------

    async def put_endpoint(self, record: EndpointRecord) -> None:
        """Insert or replace the endpoint (model, replica)."""
        await self._call(endpoints.put_endpoint, self._engine, record)

    async def delete_endpoint(self, model: str, replica: str) -> None:
        """Remove the endpoint if present."""
        await self._call(endpoints.delete_endpoint, self._engine, model, replica)

    async def list_endpoints(self, model: str | None = None) -> list[EndpointRecord]:
        """Endpoints of one model, or of all models, ordered by (model, replica)."""
        return await self._call(endpoints.list_endpoints, self._engine, model)

    async def put_benchmark(self, record: BenchmarkRecord) -> None:
        """Insert or replace the result of (namespace, key)."""
        await self._call(benchmarks.put_benchmark, self._engine, record)

    async def list_benchmarks(self, namespace: str) -> list[BenchmarkRecord]:
        """The results of one namespace, ordered by key."""
        return await self._call(benchmarks.list_benchmarks, self._engine, namespace)

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


def _parse_version(what: str, key: str, text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        raise ConflictError(
            f"{what} {key}: resourceVersion {text!r} is not one we issued"
        ) from None


def _reason(exc: SQLAlchemyError) -> str:
    orig = getattr(exc, "orig", None)
    text = str(orig if orig is not None else exc).strip().splitlines()
    return f"{type(orig or exc).__name__}: {text[0] if text else ''}"
