"""Access to the real Redis and PostgreSQL that development and CI machines run.

A test that needs one skips with a reason when it is absent, except under CI=true, where
an absent server is a failure: CI must never pass by skipping.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import NoReturn
from urllib.parse import urlsplit, urlunsplit

import pytest

REDIS_URL = os.environ.get("FLEXINFER_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
POSTGRES_URL = os.environ.get(
    "FLEXINFER_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)


def unavailable(what: str, exc: BaseException) -> NoReturn:
    """Skip (or under CI=true, fail) because ``what`` cannot be reached."""
    message = f"{what} is not reachable: {exc}"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{message} (CI=true: tests must not be skipped)")
    pytest.skip(message)


def require_redis() -> str:
    """The Redis URL, after checking that the server answers."""
    import redis

    client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2)
    try:
        client.ping()
    except redis.RedisError as exc:
        unavailable(f"Redis at {REDIS_URL}", exc)
    finally:
        client.close()
    return REDIS_URL


@asynccontextmanager
async def redis_prefix(tail: str = "") -> AsyncIterator[str]:
    """A key prefix of the caller's own on the test Redis (``...:<tail>``), after checking
    that Redis answers; every key under it is deleted when the block ends."""
    from redis.asyncio import Redis

    url = require_redis()
    prefix = f"flexinfer-test:{uuid.uuid4().hex[:12]}:{tail}"
    try:
        yield prefix
    finally:
        client = Redis.from_url(url)
        try:
            keys = [key async for key in client.scan_iter(match=f"{prefix}*")]
            if keys:
                await client.delete(*keys)
        finally:
            await client.aclose()


def _libpq_url(url: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(scheme="postgresql"))


@contextmanager
def absent_postgres_database(prefix: str = "flexinfer_test") -> Iterator[tuple[str, str]]:
    """(SQLAlchemy URL, name) of a database that does not exist yet, after checking that the
    server answers; whatever created it meanwhile, it is dropped when the block ends."""
    import psycopg

    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    admin_url = _libpq_url(POSTGRES_URL)
    try:
        with psycopg.connect(admin_url, autocommit=True, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        unavailable(f"PostgreSQL at {POSTGRES_URL}", exc)
    parts = urlsplit(POSTGRES_URL)
    try:
        yield urlunsplit(parts._replace(path=f"/{name}")), name
    finally:
        with psycopg.connect(admin_url, autocommit=True, connect_timeout=3) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextmanager
def postgres_database(prefix: str = "flexinfer_test") -> Iterator[str]:
    """A fresh PostgreSQL database for the duration of the block; yields its SQLAlchemy URL."""
    import psycopg

    with absent_postgres_database(prefix) as (url, name):
        with psycopg.connect(_libpq_url(POSTGRES_URL), autocommit=True, connect_timeout=3) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        yield url


@contextmanager
def postgres_role(prefix: str = "flexinfer_test") -> Iterator[str]:
    """A login role without CREATEDB for the block (the server's trust auth lets it in)."""
    import psycopg

    role = f"{prefix}_{uuid.uuid4().hex[:12]}"
    admin_url = _libpq_url(POSTGRES_URL)
    try:
        with psycopg.connect(admin_url, autocommit=True, connect_timeout=3) as conn:
            conn.execute(f'CREATE ROLE "{role}" LOGIN NOCREATEDB')
    except psycopg.Error as exc:
        unavailable(f"PostgreSQL at {POSTGRES_URL}", exc)
    try:
        yield role
    finally:
        with psycopg.connect(admin_url, autocommit=True, connect_timeout=3) as conn:
            conn.execute(f'DROP ROLE IF EXISTS "{role}"')


def database_exists(name: str) -> bool:
    """Whether the test PostgreSQL server has a database called ``name``."""
    import psycopg

    with psycopg.connect(_libpq_url(POSTGRES_URL), autocommit=True, connect_timeout=3) as conn:
        row = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
    return row is not None
