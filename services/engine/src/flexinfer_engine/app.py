"""The engine's FastAPI app: OpenAI routes, sleep/wake, health, metrics."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from flexinfer_common.errors import ConfigError
from flexinfer_common.telemetry import setup_telemetry
from flexinfer_common.web import health_router, install_error_handlers, openai_error
from flexinfer_engine.api.admin_routes import admin_router
from flexinfer_engine.api.limits import BodyLimit
from flexinfer_engine.api.lora_routes import lora_router
from flexinfer_engine.api.metrics import (
    engine_hooks,
    kv_cache_gauge,
    request_gauges,
    sleep_gauge,
)
from flexinfer_engine.api.openai_routes import ServedModel, openai_router
from flexinfer_engine.api.validation import install_request_errors
from flexinfer_engine.core.adapters import AdapterRegistry, LoRALimits
from flexinfer_engine.core.config import parameter_count
from flexinfer_engine.core.engine import InferenceEngine
from flexinfer_engine.core.lora import linear_shapes
from flexinfer_engine.core.parameters import InvalidRequestError
from flexinfer_engine.core.runner import AsyncRunner, State
from flexinfer_engine.core.timing import process_create_time
from flexinfer_engine.peer_source import EnginePeerSource
from flexinfer_engine.settings import EngineSettings
from flexinfer_transfer import create_loader_chain
from flexinfer_transfer.peer_source import PeerSourceSettings


def build_engine(settings: EngineSettings) -> InferenceEngine:
    """An (unloaded) engine for the model directory the settings name."""
    if settings.model_dir is None:
        raise ConfigError("no model directory: pass --model-dir or set FLEXINFER_ENGINE_MODEL_DIR")
    loader = create_loader_chain(settings.loaders)
    return InferenceEngine(Path(settings.model_dir), loader, settings.device)


def create_app(
    settings: EngineSettings, *, engine: InferenceEngine | None = None, url: str | None = None
) -> FastAPI:
    """The app serving ``engine`` (built from settings when not given; loads in lifespan).

    ``app.state.runner`` is the AsyncRunner, for the process entry point to await loading.
    """
    engine = engine or build_engine(settings)
    served = ServedModel(
        name=settings.served_model_name or engine.model_dir.name,
        created=int(time.time()),
        fingerprint=_fingerprint(engine),
        default_max_tokens=settings.default_max_tokens,
    )

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # Loading starts the peer source when it ends; a preloaded engine starts it now.
        loading = runner.state is State.LOADING
        task = asyncio.create_task(runner.load() if loading else runner.start_source())
        try:
            yield
        finally:
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            await runner.stop_source()

    app = FastAPI(title="FlexInfer engine", lifespan=lifespan)
    telemetry = setup_telemetry(app, "engine", settings.telemetry)
    runner = AsyncRunner(
        engine,
        _adapters(settings, engine, served.name),
        max_concurrent=settings.max_concurrent_generations,
        max_waiting=settings.max_waiting_requests,
        hooks=engine_hooks(telemetry.registry),
        source=_peer_source(settings, engine, served),
    )
    app.state.runner = runner
    capacity = settings.max_concurrent_generations * engine.config.max_position_embeddings
    kv_cache_gauge(telemetry.registry, engine.kv_cache_positions, capacity)
    request_gauges(telemetry.registry, lambda: runner.running, lambda: runner.waiting)
    sleep_gauge(telemetry.registry, lambda: engine.sleep_level)
    install_error_handlers(app)
    install_request_errors(app)
    app.add_exception_handler(InvalidRequestError, _on_invalid_request)
    app.add_middleware(BodyLimit, limit=settings.max_body_bytes)

    async def ready() -> bool:
        return runner.state is State.READY

    app.include_router(health_router(ready))
    app.include_router(openai_router(runner, served))
    app.include_router(lora_router(runner))
    app.include_router(admin_router(runner, lambda: engine_info(runner, served.name, url)))
    return app


def _peer_source(
    settings: EngineSettings, engine: InferenceEngine, served: ServedModel
) -> EnginePeerSource | None:
    if not settings.p2p_source:
        return None
    # The fingerprint (a hash of config.json) stands in for a revision: replicas serve
    # interchangeable bytes only when their configs agree.
    return EnginePeerSource(
        engine, served.name, served.fingerprint, PeerSourceSettings(), settings.worker_id
    )


def _adapters(settings: EngineSettings, engine: InferenceEngine, base: str) -> AdapterRegistry:
    limits = LoRALimits(settings.max_loras, settings.max_lora_rank, tuple(settings.lora_roots))
    return AdapterRegistry(
        limits,
        linear_shapes(engine.model),
        base_name=base,
        device=engine.device,
        dtype=engine.config.dtype,
    )


def engine_info(runner: AsyncRunner, model: str, url: str | None) -> dict[str, Any]:
    """What /engine/info reports (a superset of the ready line)."""
    engine = runner.engine
    load = engine.load_info
    port = int(url.rsplit(":", 1)[1]) if url else None
    return {
        "pid": os.getpid(),
        "url": url,
        "port": port,
        "model": model,
        "model_dir": str(engine.model_dir),
        "device": str(engine.device),
        "state": runner.state.value,
        "sleeping": runner.state is State.SLEEPING,
        "sleep_level": engine.sleep_level,
        "process_start_seconds": (load.started_at - process_create_time()) if load else None,
        "weight_load_seconds": load.seconds if load else None,
        "loader": load.strategy if load else None,
        "parameters": parameter_count(engine.config),
        "max_model_len": engine.config.max_position_embeddings,
        "waiting_requests": runner.waiting,
        "lora_adapters": [adapter.name for adapter in runner.adapters.loaded()],
        "max_loras": runner.adapters.limits.max_loras,
        "max_lora_rank": runner.adapters.limits.max_rank,
        "error": runner.error,
    }


def _fingerprint(engine: InferenceEngine) -> str:
    config = json.dumps(engine.config.to_hf_dict(), sort_keys=True).encode()
    return "fp_" + hashlib.sha256(config).hexdigest()[:12]


async def _on_invalid_request(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, InvalidRequestError)
    return openai_error(400, str(exc), param=exc.param, code=exc.code)
