"""Tables of the registry's SQL stores and the conversions between rows and records.

SQLAlchemy Core tables on a private MetaData, so no other package's tables are created in,
or dropped from, the registry's database. Timestamps are DOUBLE PRECISION Unix seconds:
they round-trip the records' float times exactly and compare with plain ``<``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Column,
    Double,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
)
from sqlalchemy.dialects.postgresql import JSONB

from flexinfer_common.errors import StoreError
from flexinfer_common.mx_identity import SourceIdentity
from flexinfer_registry.core.records import (
    ModelRecord,
    ModelStatus,
    Provider,
    SourceRecord,
    SourceStatus,
)

_JSON = JSON().with_variant(JSONB(), "postgresql")

METADATA = MetaData()

MODELS = Table(
    "mx_models",
    METADATA,
    Column("name", Text, primary_key=True),
    Column("provider", String(32), nullable=False),
    Column("status", String(16), nullable=False, index=True),
    Column("created_at", Double, nullable=False),
    Column("last_used_at", Double, nullable=False),
    Column("updated_at", Double, nullable=False),
    Column("message", Text, nullable=True),
)

WORKERS = Table(
    "mx_source_workers",
    METADATA,
    Column("mx_source_id", String(64), primary_key=True),
    Column("worker_id", Text, primary_key=True),
    Column("model_name", Text, nullable=False, index=True),
    Column("identity", _JSON, nullable=False),
    Column("worker_rank", Integer, nullable=False),
    Column("status", String(16), nullable=False, index=True),
    Column("updated_at", Double, nullable=False),
    Column("metadata", LargeBinary, nullable=False),
    Column("accelerator", Text, nullable=False),
    Column("topology", _JSON, nullable=False),
    Column("source_load", Double, nullable=True),
    Column("training_step", BigInteger, nullable=True),
    Column("layout_signature", Text, nullable=True),
    Column("pod_name", Text, nullable=False),
    Column("pod_uid", Text, nullable=False),
    Column("pod_namespace", Text, nullable=False),
)


def model_record(row: Mapping[str, Any]) -> ModelRecord:
    """A ModelRecord from an ``mx_models`` row."""
    try:
        return ModelRecord(
            name=row["name"],
            provider=Provider[row["provider"]],
            status=ModelStatus[row["status"]],
            created_at=float(row["created_at"]),
            last_used_at=float(row["last_used_at"]),
            updated_at=float(row["updated_at"]),
            message=row["message"],
        )
    except KeyError as exc:
        raise StoreError(f"SQL row of model {row['name']!r} is malformed: {exc!r}") from exc


def worker_row(record: SourceRecord) -> dict[str, Any]:
    """The ``mx_source_workers`` column values of a record."""
    return {
        "mx_source_id": record.mx_source_id,
        "worker_id": record.worker_id,
        "model_name": record.identity.model_name,
        "identity": record.identity.to_dict(),
        "worker_rank": record.worker_rank,
        "status": record.status.name,
        "updated_at": record.updated_at,
        "metadata": record.metadata,
        "accelerator": record.accelerator,
        "topology": dict(record.topology),
        "source_load": record.source_load,
        "training_step": record.training_step,
        "layout_signature": record.layout_signature,
        "pod_name": record.pod_name,
        "pod_uid": record.pod_uid,
        "pod_namespace": record.pod_namespace,
    }


def source_record(row: Mapping[str, Any]) -> SourceRecord:
    """A SourceRecord from an ``mx_source_workers`` row."""
    try:
        load, step = row["source_load"], row["training_step"]
        return SourceRecord(
            mx_source_id=row["mx_source_id"],
            worker_id=row["worker_id"],
            identity=SourceIdentity.from_dict(dict(row["identity"])),
            worker_rank=int(row["worker_rank"]),
            status=SourceStatus[row["status"]],
            updated_at=float(row["updated_at"]),
            metadata=bytes(row["metadata"]),
            accelerator=row["accelerator"],
            topology=dict(row["topology"]),
            source_load=None if load is None else float(load),
            training_step=None if step is None else int(step),
            layout_signature=row["layout_signature"],
            pod_name=row["pod_name"],
            pod_uid=row["pod_uid"],
            pod_namespace=row["pod_namespace"],
        )
    except (KeyError, TypeError) as exc:
        raise StoreError(f"SQL row of worker {row['worker_id']!r} is malformed: {exc!r}") from exc
