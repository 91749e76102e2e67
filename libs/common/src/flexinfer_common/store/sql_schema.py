"""Tables of the SQL store and the (de)serialisation between rows and API objects.

Plain SQLAlchemy Core tables on a private MetaData (not SQLModel's shared registry), so
another package's tables are never created in, or dropped from, the store's database.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    DateTime,
    MetaData,
    String,
    Table,
    Text,
)
from sqlalchemy.dialects.postgresql import JSONB

from flexinfer_common.api import API_VERSION, Model
from flexinfer_common.store.base import EndpointRecord

# JSONB on PostgreSQL (compact, comparable); JSON text elsewhere.
_JSON = JSON().with_variant(JSONB(), "postgresql")

METADATA = MetaData()

MODELS = Table(
    "flexinfer_models",
    METADATA,
    Column("namespace", String(63), primary_key=True),
    Column("name", String(253), primary_key=True),
    Column("uid", String(36), nullable=False),
    Column("generation", BigInteger, nullable=False),
    Column("resource_version", BigInteger, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("meta", _JSON, nullable=False),
    Column("spec", _JSON, nullable=False),
    Column("spec_hash", String(64), nullable=False),
    Column("status", _JSON, nullable=False),
)

ENDPOINTS = Table(
    "flexinfer_endpoints",
    METADATA,
    Column("model", String(320), primary_key=True),
    Column("replica", String(253), primary_key=True),
    Column("url", Text, nullable=False),
    Column("ready", Boolean, nullable=False),
    Column("node", String(253), nullable=True),
    Column("updated_at", DateTime(timezone=True), nullable=False),
)

COUNTERS = Table(
    "flexinfer_counters",
    METADATA,
    Column("name", String(32), primary_key=True),
    Column("value", BigInteger, nullable=False),
)

RESOURCE_VERSION = "resource_version"
"""The counter row every write bumps: resource versions are unique across all objects, so
a deleted and re-created Model never reuses a version a stale client may still hold."""

# Metadata fields kept in their own columns rather than in the ``meta`` JSON.
_COLUMN_META = ("name", "namespace", "uid", "generation", "resourceVersion", "creationTimestamp")


def to_utc(value: datetime) -> datetime:
    """``value`` in UTC; naive values (SQLite returns those) are taken to be UTC already."""
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


def dump(obj: Any) -> dict[str, Any]:
    """The JSON form of an API object, as it is stored."""
    data: dict[str, Any] = obj.model_dump(mode="json", by_alias=True, exclude_none=True)
    return data


def meta_json(model: Model) -> dict[str, Any]:
    """Metadata without the fields that have columns of their own."""
    data = dump(model.metadata)
    for key in _COLUMN_META:
        data.pop(key, None)
    return data


def spec_hash(spec: Mapping[str, Any]) -> str:
    """A stable digest of a spec's JSON: generation bumps only when it changes."""
    text = json.dumps(spec, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def row_to_model(row: Mapping[str, Any]) -> Model:
    """A fully populated Model from a ``flexinfer_models`` row."""
    meta = dict(row["meta"])
    meta.update(
        name=row["name"],
        namespace=row["namespace"],
        uid=row["uid"],
        generation=row["generation"],
        resourceVersion=str(row["resource_version"]),
        creationTimestamp=to_utc(row["created_at"]).isoformat(),
    )
    return Model.model_validate(
        {
            "apiVersion": API_VERSION,
            "kind": "Model",
            "metadata": meta,
            "spec": row["spec"],
            "status": row["status"],
        }
    )


def row_to_endpoint(row: Mapping[str, Any]) -> EndpointRecord:
    """An EndpointRecord from a ``flexinfer_endpoints`` row."""
    return EndpointRecord(
        model=row["model"],
        replica=row["replica"],
        url=row["url"],
        ready=bool(row["ready"]),
        node=row["node"],
        updated_at=to_utc(row["updated_at"]),
    )


def now_utc() -> datetime:
    """The current time in UTC."""
    return datetime.now(UTC)
