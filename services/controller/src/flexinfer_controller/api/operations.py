"""POST /v1/admin/models/{name}/pin, /unpin and /unload: an operator's hand on a Model.

Each is an annotation write (``flexinfer_common.api.operations``), so what the routes do
survives a controller restart and reads the same through ``kubectl``. Each answers the
Model as stored afterwards; an unload answers once its engines exited (within the
controller's delete wait), as llama-swap's /unload does, so its ``status.residency`` says
Stopped.
"""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from flexinfer_common.api import Model
from flexinfer_controller.api.admin import NamePath, NamespaceQuery, Service, Settings, dump
from flexinfer_controller.api.schema import document_responses


def operations_router() -> APIRouter:
    """The pin, unpin and unload routes, under /v1/admin."""
    router = APIRouter(prefix="/v1/admin", tags=["admin"])

    @router.post(
        "/models/{name}/pin",
        summary='Pin a Model (annotation flexinfer.ai/pinned: "true"): never evicted from '
        "a shared GPU",
        responses=document_responses(Model, {200: "the pinned Model"}, 400, 404, 409, 503),
    )
    async def pin(
        name: NamePath, service: Service, settings: Settings, namespace: NamespaceQuery = None
    ) -> JSONResponse:
        return JSONResponse(dump(await service.pin(namespace or settings.namespace, name, True)))

    @router.post(
        "/models/{name}/unpin",
        summary="Unpin a Model (removes flexinfer.ai/pinned)",
        responses=document_responses(Model, {200: "the unpinned Model"}, 400, 404, 409, 503),
    )
    async def unpin(
        name: NamePath, service: Service, settings: Settings, namespace: NamespaceQuery = None
    ) -> JSONResponse:
        return JSONResponse(dump(await service.pin(namespace or settings.namespace, name, False)))

    @router.post(
        "/models/{name}/unload",
        summary="Scale a Model to zero now (annotation flexinfer.ai/unloaded-at); its next "
        "request brings it back",
        responses=document_responses(
            Model,
            {200: "the Model, its engines stopped"},
            400,
            404,
            409,  # its spec keeps replicas (minReplicas > 0, scaleToZero false, endpoints)
            503,
        ),
    )
    async def unload(
        name: NamePath, service: Service, settings: Settings, namespace: NamespaceQuery = None
    ) -> JSONResponse:
        return JSONResponse(dump(await service.unload(namespace or settings.namespace, name)))

    return router
