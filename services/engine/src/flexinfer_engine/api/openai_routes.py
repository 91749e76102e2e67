"""/v1/models, /v1/completions and /v1/chat/completions, streaming or not."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response, StreamingResponse

from flexinfer_common.web import openai_error
from flexinfer_engine.api.validation import JsonRoute
from flexinfer_engine.core.lora import Adapter
from flexinfer_engine.core.requests import (
    ChatCompletionRequest,
    CompletionRequest,
    chat_prompt,
    completion_prompts,
    sampling_params,
)
from flexinfer_engine.core.responses import ResponseBuilder
from flexinfer_engine.core.runner import AsyncRunner, Generation


@dataclass(frozen=True)
class ServedModel:
    """What the routes need to know about the served model."""

    name: str
    created: int
    fingerprint: str
    default_max_tokens: int


def openai_router(runner: AsyncRunner, served: ServedModel) -> APIRouter:
    """The OpenAI-compatible routes for one model and its loaded LoRA adapters."""
    router = APIRouter(route_class=JsonRoute)
    engine = runner.engine
    context = engine.config.max_position_embeddings
    card = {
        "id": served.name,
        "object": "model",
        "created": served.created,
        "owned_by": "flexinfer",
        "root": served.name,
        "parent": None,  # as vLLM lists a base model; a LoRA adapter names its base here
        "max_model_len": context,
    }

    def adapter_card(adapter: Adapter) -> dict[str, Any]:
        # vLLM's card of an adapter: root is the lora_path it was loaded from.
        created, root = adapter.created, adapter.path
        return {**card, "id": adapter.name, "created": created, "root": root, "parent": served.name}

    def resolve(name: str) -> tuple[bool, Adapter | None]:
        """Whether ``name`` is served, and the adapter it names (None: the base model)."""
        if name == served.name:
            return True, None
        adapter = runner.adapters.get(name)
        return adapter is not None, adapter

    @router.get("/v1/models")
    async def models() -> dict[str, Any]:
        cards = [card] + [adapter_card(a) for a in runner.adapters.loaded()]
        return {"object": "list", "data": cards}

    @router.get("/v1/models/{model_id:path}", response_model=None)
    async def model(model_id: str) -> Response:
        found, adapter = resolve(model_id)
        if not found:
            return _unknown_model(model_id)
        return JSONResponse(card if adapter is None else adapter_card(adapter))

    @router.post("/v1/completions", response_model=None)
    async def completions(request: CompletionRequest) -> Response:
        found, adapter = resolve(request.model)
        if not found:
            return _unknown_model(request.model)
        prompts = completion_prompts(request, engine.tokenizer)
        return await _run("text", request, prompts, adapter)

    @router.post("/v1/chat/completions", response_model=None)
    async def chat(request: ChatCompletionRequest) -> Response:
        found, adapter = resolve(request.model)
        if not found:
            return _unknown_model(request.model)
        prompts = [chat_prompt(request, engine.tokenizer)]
        return await _run("chat", request, prompts, adapter)

    async def _run(
        kind: str,
        request: CompletionRequest | ChatCompletionRequest,
        prompts: list[list[int]],
        adapter: Adapter | None,
    ) -> Response:
        params = sampling_params(
            request, prompts, engine.config, default_max_tokens=served.default_max_tokens
        )
        include_usage = bool(request.stream_options and request.stream_options.include_usage)
        builder = ResponseBuilder(
            kind,
            request.model,  # the adapter's name when one served it, as vLLM answers
            sum(len(p) for p in prompts),
            len(prompts) * params.n,
            served.fingerprint,
            include_usage,
        )
        generation = await runner.start(prompts, params, adapter)
        if request.stream:
            return StreamingResponse(
                _sse(builder, generation),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache"},
            )
        try:
            async for event in generation.events():
                builder.add(event)
        finally:
            generation.cancel()
        return JSONResponse(builder.final())

    return router


async def _sse(builder: ResponseBuilder, generation: Generation) -> AsyncIterator[bytes]:
    """OpenAI's SSE framing: one ``data:`` line per chunk, then ``data: [DONE]``."""
    try:
        for chunk in builder.opening_chunks():
            yield _frame(chunk)
        async for event in generation.events():
            for chunk in builder.chunks(event):
                yield _frame(chunk)
        for chunk in builder.closing_chunks():
            yield _frame(chunk)
        yield b"data: [DONE]\n\n"
    finally:
        # Reached on normal end and when the client disconnects (the task is cancelled).
        generation.cancel()


def _frame(chunk: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\n\n"


def _unknown_model(name: str) -> JSONResponse:
    return openai_error(
        404, f"The model `{name}` does not exist.", code="model_not_found", param="model"
    )
