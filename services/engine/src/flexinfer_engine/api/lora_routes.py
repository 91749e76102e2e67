"""vLLM's runtime LoRA routes: POST /v1/load_lora_adapter and /v1/unload_lora_adapter.

Wire-compatible with vLLM (VLLM_ALLOW_RUNTIME_LORA_UPDATING): success is 200 with a text
body; a refusal is vLLM's error JSON, whose ``type`` is vLLM's error kind and whose
``code`` is the HTTP status. Like /sleep and /wake_up they are admin routes without auth
of their own, as the engine has none: it listens on loopback locally and behind a
NetworkPolicy on Kubernetes, and the proxy never forwards these paths. What a load may
read is bounded by the adapter roots instead.
"""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from pydantic import BaseModel

from flexinfer_engine.api.validation import JsonRoute
from flexinfer_engine.core.lora import LoRAError, LoRANotFoundError
from flexinfer_engine.core.runner import AsyncRunner


class LoadLoRAAdapterRequest(BaseModel):
    """vLLM's load body; other members (``base_model_name``...) are ignored, as vLLM does."""

    lora_name: str
    lora_path: str
    load_inplace: bool = False
    """Replace an adapter of the same name instead of refusing (newer vLLM)."""


class UnloadLoRAAdapterRequest(BaseModel):
    """vLLM's unload body (``lora_int_id`` is accepted and unused, as in vLLM)."""

    lora_name: str
    lora_int_id: int | None = None


class VLLMErrorInfo(BaseModel):
    """vLLM's error object: its ``code`` is the HTTP status, its ``type`` vLLM's kind."""

    message: str
    type: str
    param: str | None = None
    code: int


class VLLMErrorResponse(BaseModel):
    """vLLM's error body."""

    error: VLLMErrorInfo


_ERRORS: dict[int | str, dict[str, object]] = {
    400: {"model": VLLMErrorResponse, "description": "InvalidUserInput or BadRequestError"},
    404: {"model": VLLMErrorResponse, "description": "NotFoundError"},
}
_SUCCESS: dict[int | str, dict[str, object]] = {
    200: {"content": {"text/plain": {"schema": {"type": "string"}}}},
}


def vllm_error(exc: LoRAError | LoRANotFoundError) -> JSONResponse:
    """vLLM's ErrorResponse for a refused load or unload."""
    status = 404 if isinstance(exc, LoRANotFoundError) else 400
    body = VLLMErrorResponse(error=VLLMErrorInfo(message=str(exc), type=exc.kind, code=status))
    return JSONResponse(body.model_dump(), status_code=status)


def lora_router(runner: AsyncRunner) -> APIRouter:
    """The two adapter routes of ``runner``'s engine."""
    router = APIRouter(route_class=JsonRoute, tags=["lora"])

    @router.post("/v1/load_lora_adapter", response_model=None, responses={**_SUCCESS, **_ERRORS})
    async def load_lora_adapter(request: LoadLoRAAdapterRequest) -> Response:
        """Load a PEFT adapter from a directory inside the adapter roots."""
        name = request.lora_name
        try:
            await runner.load_adapter(name, request.lora_path, replace=request.load_inplace)
        except (LoRAError, LoRANotFoundError) as exc:
            return vllm_error(exc)
        return PlainTextResponse(f"Success: LoRA adapter '{name}' added successfully.")

    @router.post("/v1/unload_lora_adapter", response_model=None, responses={**_SUCCESS, **_ERRORS})
    async def unload_lora_adapter(request: UnloadLoRAAdapterRequest) -> Response:
        """Unload an adapter; requests already running with it finish."""
        name = request.lora_name
        try:
            await runner.unload_adapter(name)
        except (LoRAError, LoRANotFoundError) as exc:
            return vllm_error(exc)
        return PlainTextResponse(f"Success: LoRA adapter '{name}' removed successfully.")

    return router
