"""The SQL store's endpoint records: upsert, delete and list, each one short transaction."""

from __future__ import annotations

from sqlalchemy import Engine, delete, select

from flexinfer_common.store import sql_schema as schema
from flexinfer_common.store.base import EndpointRecord
from flexinfer_common.store.sql_engine import upsert

_E = schema.ENDPOINTS.c


def put_endpoint(engine: Engine, record: EndpointRecord) -> None:
    """Insert or replace the endpoint (model, replica)."""
    values = {
        "model": record.model,
        "replica": record.replica,
        "url": record.url,
        "ready": record.ready,
        "node": record.node,
        "updated_at": schema.to_utc(record.updated_at),
    }
    stmt = upsert(engine, schema.ENDPOINTS).values(values)
    stmt = stmt.on_conflict_do_update(
        index_elements=["model", "replica"],
        set_={k: v for k, v in values.items() if k not in ("model", "replica")},
    )
    with engine.begin() as conn:
        conn.execute(stmt)


def delete_endpoint(engine: Engine, model: str, replica: str) -> None:
    """Remove the endpoint if present."""
    with engine.begin() as conn:
        conn.execute(delete(schema.ENDPOINTS).where(_E.model == model, _E.replica == replica))


def list_endpoints(engine: Engine, model: str | None) -> list[EndpointRecord]:
    """Endpoints of one model, or of all models, ordered by (model, replica)."""
    stmt = select(schema.ENDPOINTS)
    if model is not None:
        stmt = stmt.where(_E.model == model)
    with engine.connect() as conn:
        rows = conn.execute(stmt).all()
    records = (schema.row_to_endpoint(dict(r._mapping)) for r in rows)
    return sorted(records, key=lambda r: (r.model, r.replica))
