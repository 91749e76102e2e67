"""Create the PostgreSQL database a store URL names, when it is missing and the role may.

Distributed mode points every service at ``postgresql+psycopg://…/flexinfer``; on a fresh
server that database does not exist yet. The first service to start creates it through the
``postgres`` maintenance database. Several services starting at once may all try: the losers
see the database appear (or a duplicate error) and carry on. A role without CREATEDB gets
one line naming the ``createdb`` command an administrator runs instead.
"""

from __future__ import annotations

import logging
import time

from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError, SQLAlchemyError
from sqlalchemy.pool import NullPool

from flexinfer_common.errors import StoreError

log = logging.getLogger(__name__)

MAINTENANCE_DB = "postgres"
"""The database every PostgreSQL server has for administrative connections (createdb's)."""

_CREATED_CONCURRENTLY = frozenset({"42P04", "23505"})
"""duplicate_database, and unique_violation in pg_database when two CREATEs overlap."""
_PERMISSION_DENIED = "42501"
_TEMPLATE_BUSY = "55006"
"""object_in_use: the template database had another session; it goes away in a moment."""


def ensure_database(url: URL, connect_timeout_s: int = 5) -> bool | None:
    """Create ``url``'s database if missing: True created, False it exists, None unknown.

    None means the maintenance database could not be reached either, so the original
    connection error is the one to report. StoreError when the role may not create it.
    """
    name = url.database
    if not name or name == MAINTENANCE_DB:
        return None
    admin = _maintenance_engine(url, connect_timeout_s)
    try:
        return _create(admin, url, name)
    finally:
        admin.dispose()


def _maintenance_engine(url: URL, connect_timeout_s: int) -> Engine:
    return create_engine(
        url.set(database=MAINTENANCE_DB),
        isolation_level="AUTOCOMMIT",  # CREATE DATABASE cannot run inside a transaction
        poolclass=NullPool,  # one short session: nothing worth pooling
        connect_args={"connect_timeout": connect_timeout_s},
    )


def _create(admin: Engine, url: URL, name: str, attempts: int = 5) -> bool | None:
    for attempt in range(attempts):
        try:
            with admin.connect() as conn:
                found = conn.execute(
                    text("SELECT 1 FROM pg_database WHERE datname = :name"), {"name": name}
                ).first()
                if found is not None:
                    return False
                quoted = admin.dialect.identifier_preparer.quote(name)
                conn.execute(text(f"CREATE DATABASE {quoted}"))
        except DBAPIError as exc:
            state = getattr(exc.orig, "sqlstate", None)
            if state in _CREATED_CONCURRENTLY:
                return False
            if state == _PERMISSION_DENIED:
                raise StoreError(_createdb_hint(url, name)) from exc
            if state == _TEMPLATE_BUSY and attempt < attempts - 1:
                time.sleep(0.1 * (attempt + 1))
                continue
            if state is None:
                return None  # no answer from the server at all: not ours to explain
            raise
        except SQLAlchemyError:
            return None
        log.info("created the PostgreSQL database %s on %s", name, _server(url))
        return True
    return None


def _server(url: URL) -> str:
    return f"{url.host or 'localhost'}:{url.port or 5432}"


def _createdb_hint(url: URL, name: str) -> str:
    """The one line a role without CREATEDB gets: the command that creates the database."""
    command = ["createdb"]
    if url.host:
        command += ["-h", url.host]
    if url.port:
        command += ["-p", str(url.port)]
    if url.username:
        command += ["-O", url.username]  # owned by the service's role, so it may add tables
    command.append(name)
    role = f'role "{url.username}"' if url.username else "this role"
    return (
        f'database "{name}" does not exist on {_server(url)} and {role} may not create it: '
        f"run '{' '.join(command)} -U <a role that may>' (or grant {role} CREATEDB)"
    )
