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
from opentelemetry import propagate
from opentelemetry.sdk.trace.export import SpanExporter
from prometheus_client import CollectorRegistry
from pydantic import SecretStr

from flexinfer_common.errors import ConfigError
from flexinfer_common.telemetry import Telemetry, setup_telemetry
from flexinfer_common.web import health_router, install_error_handlers, openai_error
from flexinfer_engine.api.admin_routes import admin_router
from flexinfer_engine.api.limits import BodyLimit
from flexinfer_engine.api.lora_routes import lora_router
from flexinfer_engine.api.metrics import (
    compile_gauge,
    engine_hooks,
    kv_cache_gauge,
    request_gauges,
    sleep_gauge,
    weights_gauge,
)
from flexinfer_engine.api.openai_routes import ServedModel, openai_router
from flexinfer_engine.api.validation import install_request_errors
from flexinfer_engine.compile_cache import CompileCache
from flexinfer_engine.core.adapters import AdapterRegistry, LoRALimits
from flexinfer_engine.core.config import ModelConfig, parameter_count, read_config
from flexinfer_engine.core.engine import InferenceEngine
from flexinfer_engine.core.lora import linear_shapes
from flexinfer_engine.core.parameters import InvalidRequestError
from flexinfer_engine.core.runner import AsyncRunner, State
from flexinfer_engine.core.timing import process_create_time
from flexinfer_engine.peer_source import EnginePeerSource
from flexinfer_engine.settings import EngineSettings
from flexinfer_engine.weight_loading import Replica, build_loader
from flexinfer_transfer.engine_loading import default_worker_id
from flexinfer_transfer.nixl_transport import Progress
from flexinfer_transfer.peer_source import PeerSourceSettings


def build_engine(settings: EngineSettings, progress: Progress | None = None) -> InferenceEngine:
    """An (unloaded) engine for the model directory the settings name, loading through the
    strategy chain (``progress`` hears of each batch READ from a peer)."""
    if settings.model_dir is None:
        raise ConfigError("no model directory: pass --model-dir or set FLEXINFER_ENGINE_MODEL_DIR")
    model_dir = Path(settings.model_dir)
    config = read_config(model_dir)
    loader = build_loader(
        model_dir,
        config,
        replica_of(settings, model_dir, config),
        settings.transfer,
        settings.registry,
        CollectorRegistry(),
        progress,
        registry_token=settings.registry_bearer(),
    )
    return InferenceEngine(model_dir, loader, settings.device)


def replica_of(settings: EngineSettings, model_dir: Path, config: ModelConfig) -> Replica:
    """Who this engine is among its model's replicas (served name, config fingerprint)."""
    return Replica(
        model_name=settings.served_model_name or model_dir.name,
        revision=fingerprint(config),
        worker_id=default_worker_id(settings.worker_id),
        device=settings.device,
    )


def create_app(
    settings: EngineSettings,
    *,
    engine: InferenceEngine | None = None,
    url: str | None = None,
    span_exporter: SpanExporter | None = None,
    trace_parent: str | None = None,
) -> FastAPI:
    """The app serving ``engine`` (built from settings when not given; loads in lifespan).

    ``app.state.runner`` is the AsyncRunner, for the process entry point to await loading;
    ``span_exporter`` replaces the OTLP exporter when tracing is on (tests);
    ``trace_parent`` (a W3C traceparent: the scale-up that started this engine) is the
    trace the weight loading joins.
    """
    engine = engine or build_engine(settings)
    if trace_parent:
        engine.load_parent = propagate.extract({"traceparent": trace_parent})
    replica = replica_of(settings, engine.model_dir, engine.config)
    served = ServedModel(
        name=replica.model_name,
        created=int(time.time()),
        fingerprint=replica.revision,
        default_max_tokens=settings.default_max_tokens,
    )

    async def start() -> None:
        # Loading starts the peer source when it ends; a preloaded engine starts it now.
        if runner.state is State.LOADING:
            await runner.load()
        else:
            await runner.start_source()
        if compiled is not None and runner.state is State.READY:
            await asyncio.to_thread(compiled.publish, engine)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        task = asyncio.create_task(start())
        try:
            yield
        finally:
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            await runner.stop_source()
            if compiled is not None:
                await asyncio.to_thread(compiled.stop)

    app = FastAPI(title="FlexInfer engine", lifespan=lifespan)
    telemetry = setup_telemetry(app, "engine", settings.telemetry, span_exporter=span_exporter)
    _instrument_loading(engine, telemetry)
    compiled = _compile_cache(settings, engine, replica, telemetry)
    runner = AsyncRunner(
        engine,
        _adapters(settings, engine, served.name),
        max_concurrent=settings.max_concurrent_generations,
        max_waiting=settings.max_waiting_requests,
        hooks=engine_hooks(telemetry.registry),
        source=_peer_source(settings, engine, replica),
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

    app.include_router(
        health_router(
            ready,
            lambda: {"weights": weights_report(engine), "compile_cache": compile_report(compiled)},
        )
    )
    app.include_router(openai_router(runner, served))
    app.include_router(lora_router(runner))
    app.include_router(admin_router(runner, lambda: engine_info(runner, served.name, url)))
    return app


def _instrument_loading(engine: InferenceEngine, telemetry: Telemetry) -> None:
    """Weight loading on the app's /metrics and in its traces."""
    for collector in engine.loader.chain.metrics.collectors():
        telemetry.registry.register(collector)
    weights_gauge(telemetry.registry, lambda: engine.load_info)
    if telemetry.tracer_provider is not None:
        engine.tracer = telemetry.tracer_provider.get_tracer("flexinfer.engine")


def _compile_cache(
    settings: EngineSettings, engine: InferenceEngine, replica: Replica, telemetry: Telemetry
) -> CompileCache | None:
    """Compile mode, when on: run by the engine's first load, reported and measured."""
    if not settings.compile:
        return None
    compiled = CompileCache(
        settings,
        replica.identity(engine.config),
        replica.worker_id,
        engine.loader.chain.metrics,
        telemetry.registry,
    )
    if not engine.loaded:
        engine.prepare = compiled.prepare
    compile_gauge(telemetry.registry, lambda: compiled.report)
    return compiled


def compile_report(compiled: CompileCache | None) -> dict[str, Any] | None:
    """How the compile cache was obtained (``/healthz``'s ``compile_cache``): ``none``
    without compile mode, None until the compile ran."""
    if compiled is None:
        return {"source": "none", "seconds": 0.0}
    return compiled.report.as_dict() if compiled.report is not None else None


def weights_report(engine: InferenceEngine) -> dict[str, Any] | None:
    """How the weights were loaded (``/healthz``'s ``weights``); None before a load."""
    load = engine.load_info
    if load is None:
        return None
    return {"strategy": load.strategy, "source": load.source, "seconds": load.seconds}


def _peer_source(
    settings: EngineSettings, engine: InferenceEngine, replica: Replica
) -> EnginePeerSource | None:
    if not settings.p2p_source:
        return None
    source_settings = PeerSourceSettings()
    if not source_settings.registry and settings.registry:
        source_settings = source_settings.model_copy(update={"registry": settings.registry})
    token = settings.registry_bearer()
    if source_settings.registry_token is None and token is not None:
        source_settings = source_settings.model_copy(update={"registry_token": SecretStr(token)})
    return EnginePeerSource(
        engine, replica.identity(engine.config), source_settings, replica.worker_id
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
        "weights": weights_report(engine),
        "parameters": parameter_count(engine.config),
        "max_model_len": engine.config.max_position_embeddings,
        "waiting_requests": runner.waiting,
        "lora_adapters": [adapter.name for adapter in runner.adapters.loaded()],
        "max_loras": runner.adapters.limits.max_loras,
        "max_lora_rank": runner.adapters.limits.max_rank,
        "error": runner.error,
    }


def fingerprint(config: ModelConfig) -> str:
    """A hash of the model's config: replicas with equal ones serve interchangeable bytes."""
    text = json.dumps(config.to_hf_dict(), sort_keys=True).encode()
    return "fp_" + hashlib.sha256(text).hexdigest()[:12]


async def _on_invalid_request(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, InvalidRequestError)
    return openai_error(400, str(exc), param=exc.param, code=exc.code)
