"""The registry's HTTP app; its lifespan also runs the gRPC server and background tasks."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial

from fastapi import Depends, FastAPI
from opentelemetry.sdk.trace.export import SpanExporter

from flexinfer_common.auth import AdminTokens, load_admin_tokens
from flexinfer_common.errors import ConfigError, UnavailableError
from flexinfer_common.telemetry import setup_telemetry
from flexinfer_common.web import health_router, install_error_handlers
from flexinfer_registry.adapters.providers import builtin_providers
from flexinfer_registry.adapters.stores import create_stores
from flexinfer_registry.core.downloads import ProviderResolver, TrackerTiming
from flexinfer_registry.core.eviction import EvictionPolicy
from flexinfer_registry.core.info import ServerInfo
from flexinfer_registry.core.metrics import RegistryMetrics
from flexinfer_registry.core.providers.base import ProviderConfig
from flexinfer_registry.core.service import CoreConfig, RegistryCore, build_core
from flexinfer_registry.core.store import Stores
from flexinfer_registry.server.admin_api import (
    admin_router,
    bearer_guard,
    document_errors_as_answered,
    install_admin_errors,
)
from flexinfer_registry.server.grpc_server import GrpcOptions, start_grpc_server
from flexinfer_registry.settings import RegistrySettings

log = logging.getLogger(__name__)


def core_config(settings: RegistrySettings) -> CoreConfig:
    """The core's configuration from the settings."""
    return CoreConfig(
        cache_dir=settings.cache_dir.expanduser(),
        timing=TrackerTiming(
            heartbeat_s=settings.download_heartbeat_s,
            stale_s=settings.download_stale_s,
            poll_s=settings.download_poll_s,
        ),
        heartbeat_timeout_s=settings.heartbeat_timeout_s,
        gc_timeout_s=settings.gc_timeout_s,
        default_chunk_size=settings.default_chunk_size,
        max_chunk_size=settings.max_chunk_size,
        eviction=EvictionPolicy(
            unused_threshold_s=settings.eviction_unused_threshold_s,
            max_models=settings.eviction_max_models,
            max_size_bytes=settings.cache_max_size_bytes,
            min_free_space_bytes=settings.eviction_min_free_space_bytes,
        ),
        evict_on_download=settings.eviction_enabled,
        limits=settings.limits.to_core(),
    )


def default_providers(settings: RegistrySettings) -> ProviderResolver:
    """The built-in provider registry (file, Hugging Face, S3, GCS, NGC, OCI)."""
    return builtin_providers(
        ProviderConfig(
            file_roots=tuple(settings.file_roots),
            oci_insecure_registries=frozenset(h.lower() for h in settings.oci_insecure_registries),
            oci_auth_file=settings.oci_auth_file,
        )
    )


@dataclass(frozen=True)
class _Wiring:
    """What the lifespan builds the core from."""

    settings: RegistrySettings
    info: ServerInfo
    stores: Stores | None
    providers: ProviderResolver | None
    clock: Callable[[], float]
    tokens: GrpcTokens


@asynccontextmanager
async def _running(app: FastAPI, wiring: _Wiring) -> AsyncIterator[None]:
    """Build the core, serve gRPC and run the background tasks for the app's lifetime."""
    settings = wiring.settings
    stores = wiring.stores if wiring.stores is not None else await create_stores(settings)
    core = build_core(
        core_config(settings),
        stores,
        wiring.providers or default_providers(settings),
        metrics=app.state.metrics,
        info=wiring.info,
        clock=wiring.clock,
    )
    await asyncio.to_thread(core.cache.clean_tmp, settings.download_stale_s)
    options = GrpcOptions(
        host=settings.grpc_host,
        port=settings.grpc_port,
        max_message_bytes=settings.grpc_max_message_bytes,
        tokens=wiring.tokens.admin,
        p2p_tokens=wiring.tokens.p2p,
        fetch_tokens=wiring.tokens.fetch,
        tracer_provider=app.state.telemetry.tracer_provider,
    )
    grpc_server = await start_grpc_server(options, wiring.info, core)
    app.state.core = core
    app.state.grpc_address = grpc_server.address
    tasks = _background(core, settings)
    try:
        yield
    finally:
        app.state.grpc_address = None
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await grpc_server.stop(settings.grpc_grace_s)
        await core.tracker.close()
        if wiring.stores is None:  # injected stores belong to whoever passed them
            await stores.close()


@dataclass(frozen=True)
class GrpcTokens:
    """The gRPC API's tokens by scope (grpc_auth); None: no token of that scope."""

    admin: AdminTokens | None = None
    p2p: AdminTokens | None = None
    fetch: AdminTokens | None = None


def grpc_tokens(settings: RegistrySettings) -> GrpcTokens:
    """The admin, P2P and fetch tokens; ConfigError when a narrow token could not mean
    anything (no admin token) or would hold another scope too (a shared value)."""
    secret = settings.auth_token.get_secret_value() if settings.auth_token else None
    admin = AdminTokens([secret]) if secret else None
    p2p = load_admin_tokens(settings.p2p_token, settings.p2p_token_file, kind="P2P")
    fetch = load_admin_tokens(settings.fetch_token, settings.fetch_token_file, kind="fetch")
    for kind, narrow in (("P2P", p2p), ("fetch", fetch)):
        if narrow is None:
            continue
        if admin is None:
            raise ConfigError(
                f"FLEXINFER_REGISTRY_{kind.upper()}_TOKEN is set but FLEXINFER_REGISTRY_AUTH_TOKEN "
                f"is not: without an admin token every call is open, so a {kind} token would "
                "restrict nothing"
            )
        if narrow.overlaps(admin):
            raise ConfigError(
                f"the {kind} token must differ from the admin token (it would open all)"
            )
    if p2p is not None and fetch is not None and p2p.overlaps(fetch):
        raise ConfigError("the P2P and fetch tokens must differ (one token would hold both scopes)")
    return GrpcTokens(admin, p2p, fetch)


def create_app(
    settings: RegistrySettings,
    *,
    info: ServerInfo | None = None,
    stores: Stores | None = None,
    providers: ProviderResolver | None = None,
    clock: Callable[[], float] = time.time,
    span_exporter: SpanExporter | None = None,
) -> FastAPI:
    """The registry app: admin REST, /healthz, /readyz, /metrics, and gRPC on grpc_port.

    ``stores`` and ``providers`` default to what the settings name; injected stores are not
    closed by the app (their owner may share them between apps). ``span_exporter``
    replaces the OTLP exporter when tracing is on (an in-process collector, tests). Once started,
    ``app.state.grpc_address`` is the bound gRPC address and ``app.state.core`` the core.
    """
    tokens = grpc_tokens(settings)
    wiring = _Wiring(settings, info or ServerInfo(), stores, providers, clock, tokens)
    app = FastAPI(title="FlexInfer registry", lifespan=partial(_running, wiring=wiring))
    app.state.settings = settings
    app.state.info = wiring.info
    app.state.grpc_address = None
    app.state.core = None

    async def ready() -> bool:
        return app.state.grpc_address is not None

    def running_core() -> RegistryCore:
        core: RegistryCore | None = app.state.core
        if core is None:
            raise UnavailableError("the registry is starting or stopping", delay=1.0)
        return core

    install_error_handlers(app)
    install_admin_errors(app)
    app.include_router(health_router(ready))
    eviction = core_config(settings).eviction
    # The REST admin API is the admin token's alone: no narrow token opens any route.
    guard = [Depends(bearer_guard(tokens.admin))]
    app.include_router(admin_router(running_core, eviction), dependencies=guard)
    document_errors_as_answered(app)
    app.state.telemetry = setup_telemetry(
        app, "registry", settings.telemetry, span_exporter=span_exporter
    )
    app.state.metrics = RegistryMetrics(app.state.telemetry.registry)
    return app


def _background(core: RegistryCore, settings: RegistrySettings) -> list[asyncio.Task[None]]:
    """The reaper (always) and the eviction task (when enabled)."""
    tasks = [
        asyncio.create_task(
            core.sources.run_reaper(
                settings.reaper_interval_s,
                core.metrics.active_sources.set,
                core.metrics.set_sources,
            ),
            name="registry reaper",
        )
    ]
    if settings.eviction_enabled:
        tasks.append(
            asyncio.create_task(
                core.remover.run(core.config.eviction, settings.eviction_interval_s),
                name="registry eviction",
            )
        )
    return tasks


__all__ = ["core_config", "create_app"]
