"""Admin REST API: Model and LoRAAdapter CRUD (JSON or YAML, as the CRDs), endpoint records."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Depends, FastAPI, Query, Request
from fastapi.responses import JSONResponse, Response

from flexinfer_common.api import API_VERSION, LoRAAdapter, Model
from flexinfer_common.api.meta import ApiModel
from flexinfer_common.errors import InvalidSpecError
from flexinfer_common.web import openai_error
from flexinfer_controller.core.adapters import AdapterService
from flexinfer_controller.core.documents import Format, decode, parse_adapter, parse_model
from flexinfer_controller.core.models import ModelService
from flexinfer_controller.settings import ControllerSettings

_JSON_TYPES = {"application/json"}
_YAML_TYPES = {"application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml"}

Doc = TypeVar("Doc", bound=ApiModel)
Parser = Callable[..., Doc]


class BodyError(Exception):
    """A request body rejected before parsing (size, media type)."""

    def __init__(self, status: int, message: str, code: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code


def get_service(request: Request) -> ModelService:
    """The app's ModelService (built in create_app)."""
    service: ModelService = request.app.state.model_service
    return service


def get_settings(request: Request) -> ControllerSettings:
    """The app's settings."""
    settings: ControllerSettings = request.app.state.settings
    return settings


def get_adapter_service(request: Request) -> AdapterService:
    """The app's AdapterService (built in create_app)."""
    service: AdapterService = request.app.state.adapter_service
    return service


Service = Annotated[ModelService, Depends(get_service)]
Adapters = Annotated[AdapterService, Depends(get_adapter_service)]
Settings = Annotated[ControllerSettings, Depends(get_settings)]
NamespaceQuery = Annotated[str | None, Query(min_length=1, max_length=63)]


def _media_format(content_type: str | None) -> Format | None:
    if not content_type:
        return None
    media = content_type.split(";", 1)[0].strip().lower()
    if media in _JSON_TYPES or media.endswith("+json"):
        return "json"
    if media in _YAML_TYPES:
        return "yaml"
    raise BodyError(
        415, f"unsupported Content-Type {media!r}: use application/json or application/yaml",
        "unsupported_media_type",
    )  # fmt: skip


async def read_body(request: Request, limit: int) -> bytes:
    """The body, refusing more than ``limit`` bytes without reading them all."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BodyError(413, f"body exceeds {limit} bytes", "body_too_large")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyError(413, f"body exceeds {limit} bytes", "body_too_large")
        chunks.append(chunk)
    return b"".join(chunks)


async def _document_from(
    request: Request,
    settings: ControllerSettings,
    namespace: str | None,
    name: str | None,
    parse: Parser[Doc],
    kind: str,
) -> Doc:
    """The body as a validated ``kind`` document (JSON or YAML, size-capped)."""
    fmt = _media_format(request.headers.get("content-type"))
    body = await read_body(request, settings.max_body_bytes)
    if not body.strip():
        raise BodyError(400, f"request body is empty: send a {kind} document", "empty_body")
    return parse(
        decode(body, fmt, kind),
        namespace=namespace,
        default_namespace=settings.namespace,
        path_name=name,
    )


async def _model_from(
    request: Request, settings: ControllerSettings, namespace: str | None, name: str | None
) -> Model:
    return await _document_from(request, settings, namespace, name, parse_model, "Model")


def dump(model: ApiModel) -> dict[str, Any]:
    """A Model (or any API object) as the API returns it: camelCase, without nulls."""
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


def admin_router() -> APIRouter:
    """Routes under /v1/admin."""
    router = APIRouter(prefix="/v1/admin")

    @router.post("/models", status_code=201)
    async def create_model(
        request: Request, service: Service, settings: Settings, namespace: NamespaceQuery = None
    ) -> JSONResponse:
        model = await _model_from(request, settings, namespace, None)
        return JSONResponse(dump(await service.create(model)), status_code=201)

    @router.put("/models/{name}")
    async def apply_model(
        name: str,
        request: Request,
        service: Service,
        settings: Settings,
        namespace: NamespaceQuery = None,
    ) -> JSONResponse:
        model = await _model_from(request, settings, namespace, name)
        stored, created = await service.apply(model)
        return JSONResponse(dump(stored), status_code=201 if created else 200)

    @router.get("/models")
    async def list_models(
        service: Service, settings: Settings, namespace: NamespaceQuery = None
    ) -> dict[str, Any]:
        items = await service.list_models(namespace or settings.namespace)
        return {"apiVersion": API_VERSION, "kind": "ModelList", "items": [dump(m) for m in items]}

    @router.get("/models/{name}")
    async def get_model(
        name: str, service: Service, settings: Settings, namespace: NamespaceQuery = None
    ) -> dict[str, Any]:
        return dump(await service.get(namespace or settings.namespace, name))

    @router.delete("/models/{name}", status_code=204)
    async def delete_model(
        name: str, service: Service, settings: Settings, namespace: NamespaceQuery = None
    ) -> Response:
        await service.delete(namespace or settings.namespace, name)
        return Response(status_code=204)

    _adapter_routes(router)

    @router.get("/endpoints")
    async def list_endpoints(service: Service, model: str | None = None) -> dict[str, Any]:
        records = await service.endpoints(model)
        return {
            "items": [
                {
                    "model": r.model,
                    "replica": r.replica,
                    "url": r.url,
                    "ready": r.ready,
                    "node": r.node,
                    "updatedAt": r.updated_at.isoformat(),
                }
                for r in records
            ]
        }

    return router


def _adapter_routes(router: APIRouter) -> None:
    """/loraadapters[/{name}]: the same CRUD as /models."""

    async def adapter_from(
        request: Request, settings: ControllerSettings, namespace: str | None, name: str | None
    ) -> LoRAAdapter:
        return await _document_from(
            request, settings, namespace, name, parse_adapter, "LoRAAdapter"
        )

    @router.post("/loraadapters", status_code=201)
    async def create_adapter(
        request: Request, service: Adapters, settings: Settings, namespace: NamespaceQuery = None
    ) -> JSONResponse:
        adapter = await adapter_from(request, settings, namespace, None)
        return JSONResponse(dump(await service.create(adapter)), status_code=201)

    @router.put("/loraadapters/{name}")
    async def apply_adapter(
        name: str,
        request: Request,
        service: Adapters,
        settings: Settings,
        namespace: NamespaceQuery = None,
    ) -> JSONResponse:
        adapter = await adapter_from(request, settings, namespace, name)
        stored, created = await service.apply(adapter)
        return JSONResponse(dump(stored), status_code=201 if created else 200)

    @router.get("/loraadapters")
    async def list_adapters(
        service: Adapters, settings: Settings, namespace: NamespaceQuery = None
    ) -> dict[str, Any]:
        items = await service.list_adapters(namespace or settings.namespace)
        kind = "LoRAAdapterList"
        return {"apiVersion": API_VERSION, "kind": kind, "items": [dump(a) for a in items]}

    @router.get("/loraadapters/{name}")
    async def get_adapter(
        name: str, service: Adapters, settings: Settings, namespace: NamespaceQuery = None
    ) -> dict[str, Any]:
        return dump(await service.get(namespace or settings.namespace, name))

    @router.delete("/loraadapters/{name}", status_code=204)
    async def delete_adapter(
        name: str, service: Adapters, settings: Settings, namespace: NamespaceQuery = None
    ) -> Response:
        await service.delete(namespace or settings.namespace, name)
        return Response(status_code=204)


def install_admin(app: FastAPI) -> None:
    """Mount the admin routes and their error handler."""

    async def on_body_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, BodyError)
        return openai_error(exc.status, str(exc), code=exc.code)

    async def on_invalid_spec(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, InvalidSpecError)
        return openai_error(422, str(exc), code="invalid_model", param=exc.field)

    app.add_exception_handler(BodyError, on_body_error)
    app.add_exception_handler(InvalidSpecError, on_invalid_spec)
    app.include_router(admin_router())
