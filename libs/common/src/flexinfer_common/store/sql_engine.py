"""Engines for the SQL store: one builder per database, picked from the URL's dialect."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, Insert, MetaData, Table, create_engine, event
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, OperationalError, SQLAlchemyError
from sqlalchemy.pool import StaticPool
from sqlalchemy.schema import CreateIndex, CreateTable

from flexinfer_common.errors import ConfigError
from flexinfer_common.settings import StoreSettings
from flexinfer_common.store.pg_database import ensure_database

SQLITE_BUSY_TIMEOUT_S = 30.0
"""How long a SQLite writer waits for another writer (another process) before failing:
store transactions take milliseconds, so 30 s only runs out when something is stuck."""

PG_CONNECT_TIMEOUT_S = 5
"""Seconds to wait for a PostgreSQL connection before reporting the store unavailable."""


def is_memory_sqlite(url: URL) -> bool:
    """True for ``sqlite://`` and ``sqlite:///:memory:`` (one database per engine)."""
    database = url.database or ""
    return database in ("", ":memory:") or "mode=memory" in str(url.query)


def _sqlite_engine(url: URL, settings: StoreSettings) -> Engine:
    if is_memory_sqlite(url):
        # One shared connection, else every pooled connection would see its own empty DB;
        # the store serialises access to it with a lock.
        return create_engine(
            url,
            echo=settings.echo,
            poolclass=StaticPool,
            connect_args={"check_same_thread": False},
        )
    Path(url.database or "").expanduser().parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(
        url,
        echo=settings.echo,
        connect_args={"check_same_thread": False, "timeout": SQLITE_BUSY_TIMEOUT_S},
    )

    @event.listens_for(engine, "connect")
    def _pragmas(dbapi_conn: Any, _record: Any) -> None:
        # WAL lets readers proceed while a writer commits; busy_timeout makes writers of
        # other processes wait instead of failing with "database is locked".
        cursor = dbapi_conn.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={int(SQLITE_BUSY_TIMEOUT_S * 1000)}")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    return engine


def _postgres_engine(url: URL, settings: StoreSettings) -> Engine:
    if url.drivername == "postgresql":
        # Plain postgresql:// would pick psycopg2, which is not a dependency.
        url = url.set(drivername="postgresql+psycopg")
    return create_engine(
        url,
        echo=settings.echo,
        pool_size=settings.pool_size,
        max_overflow=settings.pool_size,
        pool_pre_ping=True,  # a server restart leaves dead pooled connections behind
        connect_args={"connect_timeout": PG_CONNECT_TIMEOUT_S},
    )


_ENGINES: dict[str, Callable[[URL, StoreSettings], Engine]] = {
    "sqlite": _sqlite_engine,
    "postgresql": _postgres_engine,
}

_INSERTS: dict[str, Callable[[Table], Insert]] = {
    "sqlite": sqlite_insert,
    "postgresql": pg_insert,
}


def build_engine(settings: StoreSettings) -> Engine:
    """The engine for ``settings.url``; ConfigError for unsupported or malformed URLs."""
    try:
        url = make_url(settings.url)
    except ArgumentError as exc:
        raise ConfigError(f"invalid store url: {exc}") from exc
    try:
        builder = _ENGINES[url.get_backend_name()]
    except KeyError:
        known = ", ".join(sorted(_ENGINES))
        raise ConfigError(
            f"store url dialect {url.get_backend_name()!r} is not one of: {known}"
        ) from None
    return builder(url, settings)


def upsert(engine: Engine, table: Table) -> Any:
    """The dialect's INSERT construct that supports ON CONFLICT."""
    return _INSERTS[engine.dialect.name](table)


def create_tables(conn: Connection, metadata: MetaData) -> None:
    """CREATE TABLE / INDEX IF NOT EXISTS for every table of ``metadata``.

    Unlike ``create_all(checkfirst=True)``, which checks and then creates, this cannot fail
    because another process created the same table between the check and the create.
    """
    for table in metadata.sorted_tables:
        conn.execute(CreateTable(table, if_not_exists=True))
        for index in table.indexes:
            conn.execute(CreateIndex(index, if_not_exists=True))


def ensure_schema(engine: Engine, create: Callable[[Connection], None], attempts: int = 8) -> None:
    """Run ``create`` in one transaction, retrying while concurrent creators race.

    PostgreSQL can still reject a concurrent ``CREATE TABLE IF NOT EXISTS`` (a unique
    violation in its catalog), and SQLite a write while another holds the lock: both go
    away once the other creator commits, so a few short retries settle it. A PostgreSQL
    database that does not exist yet is created first (see :mod:`.pg_database`).
    """
    database_checked = engine.dialect.name != "postgresql"
    for attempt in range(attempts):
        try:
            with engine.begin() as conn:
                create(conn)
            return
        except SQLAlchemyError as exc:
            if not database_checked and isinstance(exc, OperationalError):
                database_checked = True  # once: a server that is down is not a missing database
                if ensure_database(engine.url, PG_CONNECT_TIMEOUT_S) is not None:
                    continue  # created now, or by a concurrent creator: connect again
            if attempt == attempts - 1:
                raise
            time.sleep(0.02 * (attempt + 1))
