"""The REST admin API's bodies: the views it answers with, its OpenAI-shaped error body,
and the statuses each operation documents (``responses=`` of every route)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from flexinfer_registry.core.records import ModelRecord, SourceRecord


class ModelFile(BaseModel):
    """One file of an installed model."""

    path: str
    size: int = Field(ge=0, description="bytes")


class ModelView(BaseModel):
    """One cache entry (key = model name, ``@revision`` and ``#no-weights`` when set)."""

    key: str
    provider: str
    status: str = Field(description="DOWNLOADING, DOWNLOADED or ERROR")
    created_at: float = Field(description="Unix seconds")
    last_used_at: float = Field(description="Unix seconds")
    updated_at: float = Field(description="Unix seconds")
    message: str | None = None
    files: list[ModelFile] | None = None
    total_size: int | None = Field(default=None, description="bytes")
    snapshot: str | None = Field(default=None, description="40 hex digits naming the content")


class SourceView(BaseModel):
    """One P2P source worker."""

    mx_source_id: str
    worker_id: str
    model_name: str
    worker_rank: int
    status: str = Field(description="UNKNOWN, INITIALIZING, READY or STALE")
    updated_at: float = Field(description="Unix seconds")
    accelerator: str
    source_load: float | None
    pod_name: str


class EvictionResult(BaseModel):
    """The keys one eviction pass removed."""

    evicted: list[str]


class StatusCounts(BaseModel):
    """Cache entries per status, and READY sources with a fresh heartbeat."""

    models: dict[str, int]
    ready_sources: int


class ErrorDetail(BaseModel):
    """OpenAI's error object."""

    message: str
    type: str = Field(description="invalid_request_error, authentication_error, ...")
    param: str | None = Field(description="the offending parameter, when one is to blame")
    code: str | None = Field(description="a stable machine-readable reason")


class ErrorBody(BaseModel):
    """Every error this API answers: ``{"error": {...}}``, as OpenAI's API does."""

    error: ErrorDetail


_WHY = {
    400: "A malformed model key, source filter or status (the error names the parameter).",
    401: "A token is configured and the request's bearer token is missing or wrong.",
    404: "No cache entry has this key.",
    409: "The entry is in use (downloading or being streamed) or is not DOWNLOADED.",
    503: "The registry is starting or stopping, or its store cannot be reached (Retry-After).",
}


def responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The ``responses=`` of a route that can answer ``statuses`` besides 200 (every route
    can also answer 401 and 503)."""
    return {
        status: {"model": ErrorBody, "description": _WHY[status]}
        for status in sorted({*statuses, 401, 503})
    }


def model_view(record: ModelRecord) -> ModelView:
    """A cache record as the API shows it."""
    return ModelView(
        key=record.name,
        provider=record.provider.name,
        status=record.status.name,
        created_at=record.created_at,
        last_used_at=record.last_used_at,
        updated_at=record.updated_at,
        message=record.message,
    )


def source_view(record: SourceRecord) -> SourceView:
    """A source worker as the API shows it."""
    return SourceView(
        mx_source_id=record.mx_source_id,
        worker_id=record.worker_id,
        model_name=record.model_name,
        worker_rank=record.worker_rank,
        status=record.status.name,
        updated_at=record.updated_at,
        accelerator=record.accelerator,
        source_load=record.source_load,
        pod_name=record.pod_name,
    )
