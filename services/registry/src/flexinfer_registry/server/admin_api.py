"""The REST admin API (``/v1/registry/...``): models, eviction, sources, status counts."""

from __future__ import annotations

import asyncio
import hmac
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, FastAPI, Query, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from flexinfer_common.errors import InvalidSpecError, NotFoundError
from flexinfer_common.web import openai_error
from flexinfer_registry.core.eviction import EvictionPolicy
from flexinfer_registry.core.paths import check_model_name
from flexinfer_registry.core.records import ModelRecord, SourceRecord, SourceStatus
from flexinfer_registry.core.service import RegistryCore
from flexinfer_registry.core.sources import ListFilter


class ModelView(BaseModel):
    """One cache entry (key = model name, ``@revision`` and ``#no-weights`` when set)."""

    key: str
    provider: str
    status: str
    created_at: float
    last_used_at: float
    updated_at: float
    message: str | None = None
    files: list[dict[str, Any]] | None = None
    total_size: int | None = None
    snapshot: str | None = None


class SourceView(BaseModel):
    """One P2P source worker."""

    mx_source_id: str
    worker_id: str
    model_name: str
    worker_rank: int
    status: str
    updated_at: float
    accelerator: str
    source_load: float | None
    pod_name: str


def _model_view(record: ModelRecord) -> ModelView:
    return ModelView(
        key=record.name,
        provider=record.provider.name,
        status=record.status.name,
        created_at=record.created_at,
        last_used_at=record.last_used_at,
        updated_at=record.updated_at,
        message=record.message,
    )


def _source_view(record: SourceRecord) -> SourceView:
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


def bearer_guard(token: str | None) -> Callable[[Request], None]:
    """A dependency requiring ``Authorization: Bearer <token>`` when a token is configured."""

    def check(request: Request) -> None:
        if token is None:
            return
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            given.strip().encode(), token.encode()
        ):
            raise PermissionError("missing or invalid bearer token")

    return check


def admin_router(core: Callable[[], RegistryCore], policy: EvictionPolicy) -> APIRouter:
    """The admin routes; ``core()`` returns the running core (built in the lifespan)."""
    router = APIRouter(prefix="/v1/registry", tags=["registry"])

    @router.get("/models", response_model=list[ModelView])
    async def list_models() -> list[ModelView]:
        """Every cache entry, least recently used first."""
        return [_model_view(r) for r in await core().stores.models.list_by_last_used()]

    @router.get("/models/{key:path}", response_model=ModelView)
    async def describe_model(key: str) -> ModelView:
        """One cache entry, with its files when installed."""
        check_model_name(key)
        record = await core().stores.models.get(key)
        if record is None:
            raise NotFoundError(f"no cached model {key[:200]!r}")
        view = _model_view(record)
        model = await asyncio.to_thread(core().cache.load, key)
        if model is not None:
            view.files = [{"path": f.path, "size": f.size} for f in model.files]
            view.total_size = model.total_size
            view.snapshot = model.snapshot
        return view

    @router.delete("/models/{key:path}", response_model=ModelView)
    async def delete_model(key: str) -> ModelView:
        """Remove one cache entry whatever its status (409 while downloading or in use)."""
        check_model_name(key)
        return _model_view(await core().remover.remove(key, only_downloaded=False))

    @router.post("/models/{key:path}/evict", response_model=ModelView)
    async def evict_model(key: str) -> ModelView:
        """Evict one DOWNLOADED model (409 when in use or not DOWNLOADED)."""
        check_model_name(key)
        record = await core().remover.remove(key)
        core().metrics.evictions.inc()
        return _model_view(record)

    @router.post("/evict")
    async def evict_now() -> dict[str, list[str]]:
        """Run one LRU eviction pass now."""
        return {"evicted": await core().remover.evict_once(policy)}

    @router.get("/sources", response_model=list[SourceView])
    async def list_sources(
        model_name: str | None = None,
        status: str | None = Query(default=None, description="UNKNOWN|INITIALIZING|READY|STALE"),
    ) -> list[SourceView]:
        """P2P source workers (READY = with a fresh heartbeat)."""
        wanted = None
        if status is not None:
            if status.upper() not in SourceStatus.__members__:
                raise InvalidSpecError(f"unknown status {status[:40]!r}", field="status")
            wanted = SourceStatus[status.upper()]
        found = await core().sources.list(ListFilter(model_name=model_name, status=wanted))
        return [_source_view(r) for r in found]

    @router.get("/status")
    async def status_counts() -> dict[str, Any]:
        """Cache entries per status and READY sources."""
        counts = await core().stores.models.status_counts()
        return {
            "models": {status.name: count for status, count in counts.items()},
            "ready_sources": await core().sources.count_ready(),
        }

    return router


def install_admin_errors(app: FastAPI) -> None:
    """Hostile names and paths are 400s; missing credentials 401."""

    @app.exception_handler(InvalidSpecError)
    async def on_invalid(request: Request, exc: Exception) -> JSONResponse:
        param = getattr(exc, "field", None)
        return openai_error(400, str(exc), code="invalid_argument", param=param)

    @app.exception_handler(PermissionError)
    async def on_denied(request: Request, exc: Exception) -> JSONResponse:
        return openai_error(
            401, str(exc), code="unauthorized", headers={"WWW-Authenticate": "Bearer"}
        )
