"""GET /v1/models and /v1/models/{id}: the declared models, in OpenAI's list shape."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from flexinfer_common.api import Model
from flexinfer_common.errors import FlexInferError
from flexinfer_common.web import error_responses
from flexinfer_proxy.core.auth import TokenGrant
from flexinfer_proxy.core.errors import ModelNotFoundError
from flexinfer_proxy.core.service import ProxyCore
from flexinfer_proxy.error_answers import error_response


def model_entry(name: str, model: Model, parent: str | None = None) -> dict[str, Any]:
    """One OpenAI model object for the name ``name`` of ``model``; ``parent`` is the base
    model's name for a LoRA adapter and null otherwise, as vLLM lists them."""
    created = model.metadata.creation_timestamp
    return {
        "id": name,
        "object": "model",
        "created": int(created.timestamp()) if created else 0,
        "owned_by": "flexinfer",
        "parent": parent,
    }


def _is_adapter(core: ProxyCore, name: str) -> bool:
    return any(adapter.spec.adapter_name == name for adapter in core.catalog.adapters)


def adapter_entries(core: ProxyCore, grant: TokenGrant | None) -> list[dict[str, Any]]:
    """Stored LoRA adapters whose base model is served, listed as vLLM lists them."""
    entries = []
    for adapter in core.catalog.adapters:
        target = core.catalog.lookup_target(adapter.spec.adapter_name)
        if target is None or (grant is not None and not grant.allows(target.model)):
            continue
        name = adapter.spec.adapter_name
        entries.append(model_entry(name, target.model, target.model.served_names[0]))
    return entries


def models_router(core: ProxyCore) -> APIRouter:
    """The model listing routes, answered from the proxy's cached catalog."""
    router = APIRouter()

    def grant_of(request: Request) -> TokenGrant | None:
        return core.auth.authenticate(request.headers.get("authorization", "").encode() or None)

    @router.get("/v1/models", response_model=None, responses=error_responses(401, 503))
    async def list_models(request: Request) -> Response:
        try:
            grant = grant_of(request)
        except FlexInferError as exc:
            return error_response(exc)
        if not core.catalog.loaded:
            await core.catalog.refresh()
        data = [
            model_entry(name, model)
            for model in core.catalog.models
            if grant is None or grant.allows(model)
            for name in model.served_names
            if core.catalog.lookup(name) is model
        ]
        data += adapter_entries(core, grant)
        return JSONResponse({"object": "list", "data": data})

    @router.get(
        "/v1/models/{model_id:path}", response_model=None, responses=error_responses(401, 403, 404)
    )
    async def get_model(model_id: str, request: Request) -> Response:
        try:
            grant = grant_of(request)
            target = await core.catalog.resolve_target(model_id)
            if target is None:
                raise ModelNotFoundError(model_id)
            core.auth.authorize(grant, target.model)
        except FlexInferError as exc:
            return error_response(exc)
        # An alias answers as itself (id = the name asked for), as OpenAI's retrieve does.
        parent = target.model.served_names[0] if _is_adapter(core, model_id) else None
        return JSONResponse(model_entry(model_id, target.model, parent))

    return router
