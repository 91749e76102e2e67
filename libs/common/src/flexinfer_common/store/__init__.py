"""The SQL store of declared objects and their status (SQLite or PostgreSQL via SQLModel)."""

from flexinfer_common.store.base import BenchmarkRecord, EndpointRecord, ModelStore
from flexinfer_common.store.factory import create_store

__all__ = ["BenchmarkRecord", "EndpointRecord", "ModelStore", "create_store"]
