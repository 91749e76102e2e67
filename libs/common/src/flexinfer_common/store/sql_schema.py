"""Tables of the SQL store and the (de)serialisation between rows and API objects.

The tables are SQLModel classes on a registry of their own (not SQLModel's shared default),
so another package's tables are never created in, or dropped from, the store's database.
Queries use their ``__table__`` with SQLAlchemy Core: the store needs compare-and-set
UPDATEs with RETURNING, which the ORM session layer would only get in the way of.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, cast

from sqlalchemy import JSON, BigInteger, DateTime, Table, Text
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import registry
from sqlmodel import Field, SQLModel

from flexinfer_common.api import (
    API_VERSION,
    CATALOG_KIND,
    LORA_KIND,
    LoRAAdapter,
    Model,
    ModelCatalog,
)
from flexinfer_common.store.base import EndpointRecord

# JSONB on PostgreSQL (compact, comparable); JSON text elsewhere.
_JSON = JSON().with_variant(JSONB(), "postgresql")


class _StoreTable(SQLModel, registry=registry()):
    """Base of the store's tables: their own registry and MetaData."""


class _ObjectRow(_StoreTable):
    """The columns of an API object's row: indexed identity columns, the rest as JSON.

    Not a table itself; each kind's table takes these columns (JSON columns are given by
    type, not as Column objects, since one Column cannot belong to two tables).
    """

    namespace: str = Field(primary_key=True, max_length=63)
    name: str = Field(primary_key=True, max_length=253)
    uid: str = Field(max_length=36)
    generation: int = Field(sa_type=BigInteger)
    resource_version: int = Field(sa_type=BigInteger)
    created_at: datetime = Field(sa_type=DateTime(timezone=True))
    meta: dict[str, Any] = Field(sa_type=_JSON, nullable=False)
    spec: dict[str, Any] = Field(sa_type=_JSON, nullable=False)
    spec_hash: str = Field(max_length=64)
    status: dict[str, Any] = Field(sa_type=_JSON, nullable=False)


class ModelRow(_ObjectRow, table=True):
    """One Model."""

    __tablename__ = "flexinfer_models"


class LoRAAdapterRow(_ObjectRow, table=True):
    """One LoRAAdapter: the same layout as a Model's row."""

    __tablename__ = "flexinfer_lora_adapters"


class ModelCatalogRow(_ObjectRow, table=True):
    """One ModelCatalog: the same layout again (status holds the synced entries)."""

    __tablename__ = "flexinfer_model_catalogs"


class EndpointRow(_StoreTable, table=True):
    """One replica's endpoint."""

    __tablename__ = "flexinfer_endpoints"

    model: str = Field(primary_key=True, max_length=320)
    replica: str = Field(primary_key=True, max_length=253)
    url: str = Field(sa_type=Text)
    ready: bool
    node: str | None = Field(default=None, max_length=253)
    updated_at: datetime = Field(sa_type=DateTime(timezone=True))


class BenchmarkRow(_StoreTable, table=True):
    """One measured throughput, keyed as the global benchmark ConfigMap is."""

    __tablename__ = "flexinfer_benchmarks"

    namespace: str = Field(primary_key=True, max_length=63)
    key: str = Field(primary_key=True, max_length=64)
    backend: str = Field(max_length=63)
    model: str = Field(max_length=253)
    device_class: str = Field(sa_type=Text)
    tokens_per_second: float
    measured_at: datetime = Field(sa_type=DateTime(timezone=True))


class CounterRow(_StoreTable, table=True):
    """Named monotonic counters (the global resource version)."""

    __tablename__ = "flexinfer_counters"

    name: str = Field(primary_key=True, max_length=32)
    value: int = Field(sa_type=BigInteger)


METADATA = _StoreTable.metadata
# SQLModel sets __table__ at class creation; its stubs don't declare it.
MODELS = cast(Table, ModelRow.__table__)  # type: ignore[attr-defined]
ENDPOINTS = cast(Table, EndpointRow.__table__)  # type: ignore[attr-defined]
ADAPTERS = cast(Table, LoRAAdapterRow.__table__)  # type: ignore[attr-defined]
CATALOGS = cast(Table, ModelCatalogRow.__table__)  # type: ignore[attr-defined]
COUNTERS = cast(Table, CounterRow.__table__)  # type: ignore[attr-defined]
BENCHMARKS = cast(Table, BenchmarkRow.__table__)  # type: ignore[attr-defined]

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


def meta_json(model: Model | LoRAAdapter | ModelCatalog) -> dict[str, Any]:
    """Metadata without the fields that have columns of their own."""
    data = dump(model.metadata)
    for key in _COLUMN_META:
        data.pop(key, None)
    return data


def spec_hash(spec: Mapping[str, Any]) -> str:
    """A stable digest of a spec's JSON: generation bumps only when it changes."""
    text = json.dumps(spec, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _document(row: Mapping[str, Any], kind: str) -> dict[str, Any]:
    """The API document of an object row (a Model's, LoRAAdapter's or ModelCatalog's)."""
    meta = dict(row["meta"])
    meta.update(
        name=row["name"],
        namespace=row["namespace"],
        uid=row["uid"],
        generation=row["generation"],
        resourceVersion=str(row["resource_version"]),
        creationTimestamp=to_utc(row["created_at"]).isoformat(),
    )
    return {
        "apiVersion": API_VERSION,
        "kind": kind,
        "metadata": meta,
        "spec": row["spec"],
        "status": row["status"],
    }


def row_to_model(row: Mapping[str, Any]) -> Model:
    """A fully populated Model from a ``flexinfer_models`` row."""
    return Model.model_validate(_document(row, "Model"))


def row_to_adapter(row: Mapping[str, Any]) -> LoRAAdapter:
    """A fully populated LoRAAdapter from a ``flexinfer_lora_adapters`` row."""
    return LoRAAdapter.model_validate(_document(row, LORA_KIND))


def row_to_catalog(row: Mapping[str, Any]) -> ModelCatalog:
    """A fully populated ModelCatalog from a ``flexinfer_model_catalogs`` row."""
    return ModelCatalog.model_validate(_document(row, CATALOG_KIND))


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
