"""GET /v1/models and /v1/models/{id}: the declared models, in OpenAI's list shape."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from flexinfer_common.api import Model
from flexinfer_proxy.core.errors import ModelNotFoundError
from flexinfer_proxy.core.service import ProxyCore
from flexinfer_proxy.handler import error_response


def model_entry(name: str, model: Model) -> dict[str, Any]:
    """One OpenAI model object for the name ``name`` of ``model``."""
    created = model.metadata.creation_timestamp
    return {
        "id": name,
        "object": "model",
        "created": int(created.timestamp()) if created else 0,
        "owned_by": "flexinfer",
    }


def models_router(core: ProxyCore) -> APIRouter:
    """The model listing routes, answered from the proxy's cached catalog."""
    router = APIRouter()

    @router.get("/v1/models")
    async def list_models() -> JSONResponse:
        if not core.catalog.loaded:
            await core.catalog.refresh()
        data = [
            model_entry(name, model)
            for model in core.catalog.models
            for name in model.served_names
            if core.catalog.lookup(name) is model
        ]
        return JSONResponse({"object": "list", "data": data})

    @router.get("/v1/models/{model_id:path}", response_model=None)
    async def get_model(model_id: str) -> JSONResponse:
        model = await core.catalog.resolve(model_id)
        if model is None:
            response = error_response(ModelNotFoundError(model_id))
            assert isinstance(response, JSONResponse)
            return response
        return JSONResponse(model_entry(model_id, model))

    return router
