"""Admin REST API: Model, LoRAAdapter and ModelCatalog CRUD (JSON or YAML), endpoint records."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Generic, Protocol, TypeVar

from fastapi import APIRouter, Depends, FastAPI, Path, Query, Request
from fastapi.responses import JSONResponse, Response

from flexinfer_common.api import API_VERSION, LoRAAdapter, Model, ModelCatalog
from flexinfer_common.api.meta import ApiModel
from flexinfer_common.errors import InvalidSpecError
from flexinfer_common.web import openai_error
from flexinfer_controller.api.schema import (
    EndpointList,
    EndpointView,
    document_responses,
    list_model,
    request_body,
)
from flexinfer_controller.catalog.service import CatalogService
from flexinfer_controller.core.adapters import AdapterService
from flexinfer_controller.core.documents import (
    Format,
    MalformedDocumentError,
    decode,
    parse_adapter,
    parse_catalog,
    parse_model,
)
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


def get_catalog_service(request: Request) -> CatalogService:
    """The app's CatalogService (built in create_app)."""
    service: CatalogService = request.app.state.catalog_service
    return service


Service = Annotated[ModelService, Depends(get_service)]
Settings = Annotated[ControllerSettings, Depends(get_settings)]
NamespaceQuery = Annotated[
    str | None,
    Query(min_length=1, max_length=63, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"),
]
NamePath = Annotated[
    str,
    Path(
        min_length=1,
        max_length=253,
        pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
        description="metadata.name: a lowercase RFC 1123 subdomain",
        examples=["qwen"],
    ),
]
ModelQuery = Annotated[
    str | None, Query(min_length=1, max_length=317, description="namespace/name of a Model")
]


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
    # Parsing a hostile 1 MiB YAML body takes a few hundred ms of CPU: off the event loop.
    decoded = await asyncio.to_thread(decode, body, fmt, kind)
    return parse(
        decoded,
        namespace=namespace,
        default_namespace=settings.namespace,
        path_name=name,
    )


def dump(model: ApiModel) -> dict[str, Any]:
    """A Model (or any API object) as the API returns it: camelCase, without nulls."""
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


class CrudService(Protocol[Doc]):
    """What the CRUD routes of one kind call (ModelService, AdapterService, CatalogService)."""

    async def create(self, doc: Doc, /) -> Doc:
        """Store a new object; ConflictError if it exists."""
        ...

    async def apply(self, doc: Doc, /) -> tuple[Doc, bool]:
        """Create or replace; the stored object and whether it was created."""
        ...

    async def get(self, namespace: str, name: str) -> Doc:
        """The stored object, or NotFoundError."""
        ...

    async def list_namespace(self, namespace: str | None) -> list[Doc]:
        """The objects of one namespace."""
        ...

    async def delete(self, namespace: str, name: str) -> None:
        """Delete the object; NotFoundError if absent."""
        ...


@dataclass(frozen=True)
class CrudKind(Generic[Doc]):
    """One kind served as CRUD at /v1/admin/<plural>[/{name}]."""

    kind: str
    """The document's ``kind`` ("Model"); its list is ``<kind>List``."""
    type_: type[ApiModel]
    """The document's API type, for the OpenAPI schema."""
    plural: str
    """The path segment ("models")."""
    parse: Parser[Doc]
    """Validates a decoded body (``documents.parse_model``)."""
    service: Callable[[Request], CrudService[Doc]]
    """The app's service for the kind (built in create_app)."""


def _crud_routes(router: APIRouter, spec: CrudKind[Doc]) -> None:
    """Create (POST), apply (PUT), list, get and delete for one kind."""
    _write_routes(router, spec)
    _read_routes(router, spec)


def _write_routes(router: APIRouter, spec: CrudKind[Doc]) -> None:
    """POST /<plural> (create) and PUT /<plural>/{name} (create or replace)."""
    collection, item = f"/{spec.plural}", f"/{spec.plural}/{{name}}"
    kind, body = spec.kind, request_body(spec.type_)

    async def document(
        request: Request, settings: ControllerSettings, namespace: str | None, name: str | None
    ) -> Doc:
        return await _document_from(request, settings, namespace, name, spec.parse, spec.kind)

    @router.post(
        collection,
        status_code=201,
        summary=f"Create a {kind}",
        responses=document_responses(spec.type_, {201: "created"}, 400, 409, 413, 415, 422, 503),
        openapi_extra=body,
    )
    async def create(
        request: Request, settings: Settings, namespace: NamespaceQuery = None
    ) -> JSONResponse:
        doc = await document(request, settings, namespace, None)
        return JSONResponse(dump(await spec.service(request).create(doc)), status_code=201)

    @router.put(
        item,
        summary=f"Create or replace a {kind} (kubectl apply)",
        responses=document_responses(
            spec.type_, {200: "replaced", 201: "created"}, 400, 409, 413, 415, 422, 503
        ),
        openapi_extra=body,
    )
    async def apply(
        name: NamePath, request: Request, settings: Settings, namespace: NamespaceQuery = None
    ) -> JSONResponse:
        doc = await document(request, settings, namespace, name)
        stored, created = await spec.service(request).apply(doc)
        return JSONResponse(dump(stored), status_code=201 if created else 200)


def _read_routes(router: APIRouter, spec: CrudKind[Doc]) -> None:
    """GET /<plural> (list), GET and DELETE /<plural>/{name}."""
    collection, item = f"/{spec.plural}", f"/{spec.plural}/{{name}}"
    kind, listing = spec.kind, list_model(spec.kind, spec.type_)

    @router.get(
        collection,
        summary=f"List the {kind}s of a namespace",
        responses=document_responses(listing, {200: f"the {kind}List"}, 400, 503),
    )
    async def list_all(
        request: Request, settings: Settings, namespace: NamespaceQuery = None
    ) -> JSONResponse:
        items = await spec.service(request).list_namespace(namespace or settings.namespace)
        dumped = [dump(i) for i in items]
        return JSONResponse({"apiVersion": API_VERSION, "kind": f"{kind}List", "items": dumped})

    @router.get(
        item,
        summary=f"Read a {kind}",
        responses=document_responses(spec.type_, {200: f"the {kind}"}, 400, 404, 503),
    )
    async def get(
        name: NamePath, request: Request, settings: Settings, namespace: NamespaceQuery = None
    ) -> JSONResponse:
        return JSONResponse(
            dump(await spec.service(request).get(namespace or settings.namespace, name))
        )

    @router.delete(
        item,
        status_code=204,
        summary=f"Delete a {kind}",
        responses=document_responses(None, {204: "deleted"}, 400, 404, 503),
    )
    async def delete(
        name: NamePath, request: Request, settings: Settings, namespace: NamespaceQuery = None
    ) -> Response:
        await spec.service(request).delete(namespace or settings.namespace, name)
        return Response(status_code=204)


def admin_router() -> APIRouter:
    """Routes under /v1/admin."""
    router = APIRouter(prefix="/v1/admin", tags=["admin"])
    _crud_routes(router, CrudKind("Model", Model, "models", parse_model, get_service))
    _crud_routes(
        router,
        CrudKind("LoRAAdapter", LoRAAdapter, "loraadapters", parse_adapter, get_adapter_service),
    )
    _crud_routes(
        router,
        CrudKind("ModelCatalog", ModelCatalog, "modelcatalogs", parse_catalog, get_catalog_service),
    )

    @router.get(
        "/endpoints",
        summary="The engine endpoints the runtime published",
        responses=document_responses(None, {}, 400, 503),
    )
    async def list_endpoints(service: Service, model: ModelQuery = None) -> EndpointList:
        records = await service.endpoints(model)
        return EndpointList(
            items=[
                EndpointView(
                    model=r.model,
                    replica=r.replica,
                    url=r.url,
                    ready=r.ready,
                    node=r.node,
                    updated_at=r.updated_at,
                )
                for r in records
            ]
        )

    return router


def install_admin(app: FastAPI) -> None:
    """Mount the admin routes and their error handler."""

    async def on_body_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, BodyError)
        return openai_error(exc.status, str(exc), code=exc.code)

    async def on_invalid_spec(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, InvalidSpecError)
        return openai_error(422, str(exc), code="invalid_model", param=exc.field)

    async def on_malformed(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, MalformedDocumentError)
        return openai_error(400, str(exc), code=type(exc).__name__, param=exc.path)

    app.add_exception_handler(BodyError, on_body_error)
    app.add_exception_handler(MalformedDocumentError, on_malformed)
    app.add_exception_handler(InvalidSpecError, on_invalid_spec)
    app.include_router(admin_router())
