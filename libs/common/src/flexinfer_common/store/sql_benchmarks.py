"""The SQL store's benchmark results: upsert and list, each one short transaction."""

from __future__ import annotations

from sqlalchemy import Engine, select

from flexinfer_common.store import sql_schema as schema
from flexinfer_common.store.base import BenchmarkRecord
from flexinfer_common.store.sql_engine import upsert

_B = schema.BENCHMARKS.c


def put_benchmark(engine: Engine, record: BenchmarkRecord) -> None:
    """Insert or replace the result of (namespace, key)."""
    values = {
        "namespace": record.namespace,
        "key": record.key,
        "backend": record.backend,
        "model": record.model,
        "device_class": record.device_class,
        "tokens_per_second": record.tokens_per_second,
        "measured_at": schema.to_utc(record.measured_at),
    }
    stmt = upsert(engine, schema.BENCHMARKS).values(values)
    stmt = stmt.on_conflict_do_update(
        index_elements=["namespace", "key"],
        set_={k: v for k, v in values.items() if k not in ("namespace", "key")},
    )
    with engine.begin() as conn:
        conn.execute(stmt)


def list_benchmarks(engine: Engine, namespace: str) -> list[BenchmarkRecord]:
    """The results of ``namespace``, ordered by key."""
    stmt = select(schema.BENCHMARKS).where(_B.namespace == namespace).order_by(_B.key)
    with engine.connect() as conn:
        rows = conn.execute(stmt).all()
    return [
        BenchmarkRecord(
            namespace=row.namespace,
            backend=row.backend,
            model=row.model,
            device_class=row.device_class,
            tokens_per_second=float(row.tokens_per_second),
            measured_at=schema.to_utc(row.measured_at),
        )
        for row in rows
    ]
