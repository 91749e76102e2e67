"""The REST admin API (``/v1/registry/...``): models, eviction, sources, status counts."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, FastAPI, Path, Query, Request
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from flexinfer_common.auth import AdminTokens, AuthenticationError
from flexinfer_common.errors import InvalidSpecError, NotFoundError
from flexinfer_common.web import openai_error
from flexinfer_registry.core.eviction import EvictionPolicy
from flexinfer_registry.core.identity import MAX_MODEL_NAME
from flexinfer_registry.core.paths import check_model_name
from flexinfer_registry.core.records import SourceStatus
from flexinfer_registry.core.service import RegistryCore
from flexinfer_registry.core.sources import ListFilter
from flexinfer_registry.server.admin_models import (
    EvictionResult,
    ModelFile,
    ModelView,
    SourceView,
    StatusCounts,
    model_view,
    responses,
    source_view,
)

KEY_CHARS = MAX_MODEL_NAME + 300
"""Longest cache key: a model name, ``@`` and a revision, ``#no-weights``."""

_NO_DOT_SEGMENTS = r"(?!\.\.?(/|$)|.*/\.\.?(/|$))"
_VISIBLE = r"[!-\[\]-~]"
KEY_PATTERN = rf"^(?!/){_NO_DOT_SEGMENTS}{_VISIBLE}+$"
"""What ``check_model_name`` accepts, as the OpenAPI document states it: visible ASCII but
the backslash, not absolute unless a URL, no ``.``/``..`` segment."""
NAME_PATTERN = rf"^{_NO_DOT_SEGMENTS}{_VISIBLE}+$"
"""The same for P2P model names, which may be absolute checkpoint paths."""

STATUS_NAMES = [*SourceStatus.__members__, *(n.lower() for n in SourceStatus.__members__)]
"""What ``status`` may be: exactly these (the document's enum), nothing else."""

Key = Annotated[
    str,
    Path(
        max_length=KEY_CHARS,
        description="cache key: model name, then @revision and #no-weights when set",
        # Documented, and enforced by check_model_name: the validator's regex engine has
        # no lookahead to state the dot-segment rule with.
        json_schema_extra={"pattern": KEY_PATTERN},
    ),
]


def bearer_guard(tokens: AdminTokens | None) -> Callable[[Request], None]:
    """A dependency requiring ``Authorization: Bearer <token>`` when a token is configured
    (compared as digests, in constant time: see ``AdminTokens``)."""

    def check(request: Request) -> None:
        if tokens is None:
            return
        header = request.headers.get("authorization")
        try:
            tokens.check(header.encode("latin-1") if header is not None else None)
        except AuthenticationError as exc:
            raise PermissionError("missing or invalid bearer token") from exc

    return check


def admin_router(core: Callable[[], RegistryCore], policy: EvictionPolicy) -> APIRouter:
    """The admin routes; ``core()`` returns the running core (built in the lifespan)."""
    router = APIRouter(prefix="/v1/registry", tags=["registry"])

    @router.get("/models", response_model=list[ModelView], responses=responses())
    async def list_models() -> list[ModelView]:
        """Every cache entry, least recently used first."""
        return [model_view(r) for r in await core().stores.models.list_by_last_used()]

    @router.get("/models/{key:path}", response_model=ModelView, responses=responses(400, 404))
    async def describe_model(key: Key) -> ModelView:
        """One cache entry, with its files when installed."""
        check_model_name(key, KEY_CHARS)
        record = await core().stores.models.get(key)
        if record is None:
            raise NotFoundError(f"no cached model {key[:200]!r}")
        view = model_view(record)
        model = await asyncio.to_thread(core().cache.load, key)
        if model is not None:
            view.files = [ModelFile(path=f.path, size=f.size) for f in model.files]
            view.total_size = model.total_size
            view.snapshot = model.snapshot
        return view

    @router.delete(
        "/models/{key:path}", response_model=ModelView, responses=responses(400, 404, 409)
    )
    async def delete_model(key: Key) -> ModelView:
        """Remove one cache entry whatever its status (409 while downloading or in use)."""
        check_model_name(key, KEY_CHARS)
        return model_view(await core().remover.remove(key, only_downloaded=False))

    @router.post(
        "/models/{key:path}/evict", response_model=ModelView, responses=responses(400, 404, 409)
    )
    async def evict_model(key: Key) -> ModelView:
        """Evict one DOWNLOADED model (409 when in use or not DOWNLOADED)."""
        check_model_name(key, KEY_CHARS)
        record = await core().remover.remove(key)
        core().metrics.evictions.inc()
        return model_view(record)

    @router.post("/evict", response_model=EvictionResult, responses=responses())
    async def evict_now() -> EvictionResult:
        """Run one LRU eviction pass now."""
        return EvictionResult(evicted=await core().remover.evict_once(policy))

    @router.get("/sources", response_model=list[SourceView], responses=responses(400))
    async def list_sources(
        model_name: Annotated[
            str | None,
            Query(max_length=MAX_MODEL_NAME, json_schema_extra={"pattern": NAME_PATTERN}),
        ] = None,
        status: Annotated[
            str | None,
            Query(
                description="a SourceStatus name, upper or lower case",
                json_schema_extra={"enum": STATUS_NAMES},
            ),
        ] = None,
    ) -> list[SourceView]:
        """P2P source workers (READY = with a fresh heartbeat)."""
        wanted = None
        if status is not None:
            if status not in STATUS_NAMES:
                known = ", ".join(SourceStatus.__members__)
                raise InvalidSpecError(
                    f"unknown status {status[:40]!r}; known: {known}", field="status"
                )
            wanted = SourceStatus[status.upper()]
        found = await core().sources.list(ListFilter(model_name=model_name, status=wanted))
        return [source_view(r) for r in found]

    @router.get("/status", response_model=StatusCounts, responses=responses())
    async def status_counts() -> StatusCounts:
        """Cache entries per status and READY sources."""
        counts = await core().stores.models.status_counts()
        return StatusCounts(
            models={status.name: count for status, count in counts.items()},
            ready_sources=await core().sources.count_ready(),
        )

    return router


def install_admin_errors(app: FastAPI) -> None:
    """Hostile names and paths are 400s; missing credentials 401; no route 404."""

    @app.exception_handler(InvalidSpecError)
    async def on_invalid(request: Request, exc: Exception) -> JSONResponse:
        param = getattr(exc, "field", None)
        return openai_error(400, str(exc), code="invalid_argument", param=param)

    @app.exception_handler(StarletteHTTPException)
    async def on_http(request: Request, exc: Exception) -> JSONResponse:
        # No route (a key with a newline matches no path), a wrong method: OpenAI-shaped
        # like every other error, not Starlette's {"detail": ...}.
        assert isinstance(exc, StarletteHTTPException)
        headers = dict(exc.headers) if exc.headers else None
        return openai_error(exc.status_code, str(exc.detail), headers=headers)

    @app.exception_handler(PermissionError)
    async def on_denied(request: Request, exc: Exception) -> JSONResponse:
        return openai_error(
            401, str(exc), code="unauthorized", headers={"WWW-Authenticate": "Bearer"}
        )


def document_errors_as_answered(app: FastAPI) -> None:
    """FastAPI documents a 422 for every operation with parameters, but validation errors
    are answered 400 with the OpenAI-shaped body (``install_error_handlers``), which every
    route documents itself: drop the 422s, so the document says what the API does."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        schema = build()
        for operations in schema.get("paths", {}).values():
            for operation in operations.values():
                operation.get("responses", {}).pop("422", None)
        for name in ("HTTPValidationError", "ValidationError"):
            schema.get("components", {}).get("schemas", {}).pop(name, None)
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
