"""The controller's FastAPI app: admin API, health, metrics, and the reconcile loop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial

from fastapi import FastAPI
from pydantic import SecretStr

from flexinfer_common.auth import install_admin_auth
from flexinfer_common.bus import EventBus
from flexinfer_common.placement import PlacementWeights, PluginDeps
from flexinfer_common.store import ModelStore
from flexinfer_common.telemetry import setup_telemetry
from flexinfer_common.web import health_router, install_error_handlers
from flexinfer_controller.adapters.lora import HttpAdapterEngine
from flexinfer_controller.adapters.metrics import HttpEngineMetrics
from flexinfer_controller.adapters.registry.factory import create_model_cache
from flexinfer_controller.api.admin import install_admin
from flexinfer_controller.api.benchmarks import benchmarks_router
from flexinfer_controller.api.discovery import discovery_router
from flexinfer_controller.api.logs import logs_router
from flexinfer_controller.api.operations import operations_router
from flexinfer_controller.backends import BackendRegistry, LaunchContext, default_backends
from flexinfer_controller.catalog.client import ClientOptions
from flexinfer_controller.catalog.service import CatalogService
from flexinfer_controller.catalog.wiring import CatalogSources, catalog_controller
from flexinfer_controller.core.activation_trace import ActivationTraces
from flexinfer_controller.core.adapters import AdapterEvents, AdapterService
from flexinfer_controller.core.controller import Controller, ControllerConfig
from flexinfer_controller.core.events import ModelEvents
from flexinfer_controller.core.feed import ModelFeed, NoFeed
from flexinfer_controller.core.gpu import Placer
from flexinfer_controller.core.kvcache import KVCacheCheck
from flexinfer_controller.core.lora.controller import AdapterController
from flexinfer_controller.core.metrics import ControllerMetrics
from flexinfer_controller.core.models import ModelService
from flexinfer_controller.core.placement import CorePlacer, LogMalformed, StoreBenchmarks
from flexinfer_controller.core.queue import WorkQueue
from flexinfer_controller.core.scaleout import ScaleOut
from flexinfer_controller.core.sharing import NoSharing, SharedGPUHook
from flexinfer_controller.core.sharing.clock import MonotonicClock
from flexinfer_controller.core.sharing.drain import Drainer
from flexinfer_controller.core.sharing.gpugroups import GPUGroupWiring
from flexinfer_controller.core.sharing.metrics import SwapMetrics
from flexinfer_controller.core.sharing.policy import shared_policy
from flexinfer_controller.core.sharing.wiring import running_arbiter
from flexinfer_controller.runtime import create_inventory, create_prestart, create_runtime
from flexinfer_controller.runtime.registry import Loops, RuntimePlugin, runtime_plugin
from flexinfer_controller.settings import ControllerSettings
from flexinfer_controller.sharing_settings import GPUSharingSettings

Requeue = Callable[[str], object]


@dataclass(frozen=True)
class SharingParts:
    """What a shared-GPU hook is built from besides its settings."""

    store: ModelStore
    requeue: Requeue
    """Reconcile a Model now (the members whose hold changed)."""
    gpugroups: GPUGroupWiring
    """The GPUGroups the runtime's GPUGroup loop follows (empty without one)."""
    metrics: SwapMetrics | None = None
    events: ModelEvents | None = None
    """Where each swap is recorded as Events on its Models."""


SharingFactory = Callable[[GPUSharingSettings, SharingParts], SharedGPUHook]

log = logging.getLogger(__name__)


def controller_config(settings: ControllerSettings) -> ControllerConfig:
    """The core's slice of the settings."""
    return ControllerConfig(
        namespace=settings.namespace,
        instance_id=settings.instance_id,
        workers=settings.workers,
        resync_interval_s=settings.resync_interval_s,
        reclaim_idle_s=settings.bus.reclaim_idle_s,
        stop_grace_s=settings.stop_grace_s,
        crash_backoff_initial_s=settings.crash_backoff_initial_s,
        crash_backoff_max_s=settings.crash_backoff_max_s,
        crash_loop_limit=settings.crash_loop_limit,
        crash_loop_window_s=settings.crash_loop_window_s,
        launch=LaunchContext(
            runtime=settings.runtime,
            engine_python=settings.engine_python,
            lora_roots=runtime_plugin(settings).adapter_roots(settings).texts,
            registry=settings.registry.address,
            registry_token=_secret(settings.registry.p2p_token),
        ),
        sleep=settings.sleep.policy(),
    )


def _secret(value: SecretStr | None) -> str | None:
    return value.get_secret_value() if value is not None else None


def create_placer(settings: ControllerSettings, store: ModelStore) -> Placer:
    """Step 3's placer: the scheduler's placement core, weighted by the ``SCHED_*``
    variables as the extender is, with TPS from the store's benchmark table."""
    deps = PluginDeps(weights=PlacementWeights())
    return CorePlacer(deps=deps, benchmarks=StoreBenchmarks(store), sink=LogMalformed())


def _arbiter(settings: GPUSharingSettings, parts: SharingParts) -> SharedGPUHook:
    policy = shared_policy(
        starvation_s=settings.starvation_s,
        demand_window_s=settings.demand_window_s,
        swap_cooldown_s=settings.swap_cooldown_s,
        drain_timeout_s=settings.drain_timeout_s,
    )
    return running_arbiter(
        parts.store, policy, parts.requeue, parts.gpugroups, parts.metrics, parts.events
    )


SHARING_MODES: Mapping[str, SharingFactory] = {
    "none": lambda settings, parts: NoSharing(),
    "arbiter": _arbiter,
}
"""``gpu_sharing.mode`` -> the shared-GPU hook it builds."""


def create_shared_gpu(
    settings: ControllerSettings,
    store: ModelStore,
    requeue: Requeue,
    gpugroups: GPUGroupWiring | None = None,
    metrics: SwapMetrics | None = None,
    events: ModelEvents | None = None,
) -> SharedGPUHook:
    """Step 4's shared-GPU hook by ``gpu_sharing.mode``; it reconciles Models via ``requeue``,
    arbitrates the GPUGroups of ``gpugroups`` (shared with the GPUGroup loop) and counts its
    swaps on ``metrics`` and records them on ``events``."""
    sharing = settings.gpu_sharing
    parts = SharingParts(store, requeue, gpugroups or GPUGroupWiring(), metrics, events)
    return SHARING_MODES[sharing.mode](sharing, parts)


@dataclass(frozen=True)
class LoRAParts:
    """The LoRAAdapter side of the controller: the loop loading adapters into engines, its
    HTTP client to them, and the admin API's service."""

    loop: AdapterController
    engine: HttpAdapterEngine
    service: AdapterService


def _lora_parts(
    settings: ControllerSettings,
    plugin: RuntimePlugin,
    store: ModelStore,
    bus: EventBus,
    controller: Controller,
    backends: BackendRegistry,
) -> LoRAParts:
    events = AdapterEvents(bus)
    engine = HttpAdapterEngine()
    loop = AdapterController(
        store=store,
        runtime=controller.runtime,
        backends=backends,
        engine=engine,
        cache=partial(plugin.adapter_cache, settings),
        publish=events.publish,
        announce=controller.endpoints.held,
        roots=plugin.adapter_roots(settings),
        resync_interval_s=settings.lora_resync_interval_s,
    )
    controller.watcher = loop  # replica changes make the loop look at the engines again
    return LoRAParts(loop, engine, AdapterService(store, events, loop.enqueue))


def create_app(
    settings: ControllerSettings,
    *,
    bus: EventBus,
    store: ModelStore,
    feed: ModelFeed | None = None,
    catalog_sources: CatalogSources | None = None,
    catalog_client: ClientOptions | None = None,
    placer: Placer | None = None,
    shared_gpu: SharedGPUHook | None = None,
) -> FastAPI:
    """The controller app; its lifespan adopts engines and runs the reconciler.

    ``feed`` reports Model changes made behind the admin API's back (the apiserver's
    informers on Kubernetes); none is needed with the SQL store. ``catalog_sources``
    (default: the runtime's) is where ModelCatalogs read Secrets and learn of changes;
    ``catalog_client`` overrides the registry client's options. ``placer`` and
    ``shared_gpu`` (default: ``create_placer`` and ``create_shared_gpu``) are the reconcile's
    placement seam and shared-GPU hook.

    ConfigError when the admin API would be open beyond loopback (see ``AdminAuthSettings``).
    """
    controller: Controller | None = None
    model_feed: ModelFeed = feed or NoFeed()
    plugin = runtime_plugin(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await controller_.start()
        await adapter_loop.start()
        watching = asyncio.create_task(model_feed.run(controller_.enqueue), name="model-feed")
        await catalogs.start()
        adapting = asyncio.create_task(adapter_feed.run(adapters.observed), name="adapter-feed")
        await legacy.start()
        log.info("controller ready (runtime %s, data dir %s)", settings.runtime, settings.data_dir)
        try:
            yield
        finally:
            for task in (adapting, watching):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            await legacy.stop()
            await catalogs.stop()
            await adapter_loop.stop()
            await controller_.stop(stop_engines=settings.stop_engines_on_shutdown)
            await engine_metrics.aclose()
            await adapter_engine.aclose()
            await events.aclose()

    app = FastAPI(title="FlexInfer controller", lifespan=lifespan)
    install_admin_auth(app, settings, host=settings.host, telemetry=settings.telemetry)
    telemetry = setup_telemetry(app, "controller", settings.telemetry)
    metrics = ControllerMetrics(telemetry.registry)
    engine_metrics = HttpEngineMetrics()
    backends = default_backends()
    queue = WorkQueue()  # the arbiter reconciles the members it moves through it
    gpugroups = GPUGroupWiring()  # filled by the runtime's GPUGroup loop, read by the arbiter
    clock = MonotonicClock()
    swap_metrics = SwapMetrics(telemetry.registry, clock.now)
    events = plugin.events(settings, store)
    drainer = Drainer(
        in_flight=engine_metrics,
        clock=clock,
        requeue=queue.add_after,
        metrics=swap_metrics,
        poll_s=settings.gpu_sharing.drain_poll_s,
        grace_s=settings.drain_grace_s,
    )
    controller = Controller(
        controller_config(settings),
        store=store,
        bus=bus,
        runtime_factory=partial(create_runtime, settings),
        backends=backends,
        metrics=metrics,
        prestart=create_prestart(settings),
        inventory=create_inventory(settings),
        cache_factory=partial(create_model_cache, settings),
        kv_check=KVCacheCheck(engine_metrics),
        sources=plugin.sources,
        placer=placer or create_placer(settings, store),
        shared_gpu=shared_gpu
        or create_shared_gpu(settings, store, queue.add, gpugroups, swap_metrics, events),
        queue=queue,
        drainer=drainer,
        events=events,
        scaleout=ScaleOut(engine_metrics, clock=clock.now, policy=settings.scaleout.policy()),
    )
    controller_ = controller
    if telemetry.tracer_provider is not None:
        tracer = telemetry.tracer_provider.get_tracer("flexinfer.controller")
        controller.activations = ActivationTraces(tracer)
    service = ModelService(store, bus, controller, delete_wait_s=settings.stop_grace_s + 5)
    app.state.settings = settings
    app.state.store = store
    app.state.controller = controller
    app.state.model_service = service
    lora = _lora_parts(settings, plugin, store, bus, controller, backends)
    adapter_loop, adapter_engine, adapters = lora.loop, lora.engine, lora.service
    app.state.adapter_loop = adapter_loop
    app.state.adapter_service = adapters
    adapter_feed = plugin.adapters(settings, store)
    legacy = Loops(  # v1alpha1 ModelDeployments and ModelCaches, then GPUGroups
        plugin.legacy(settings, store), plugin.gpugroups(settings, store, gpugroups, queue.add)
    )
    sources = catalog_sources or plugin.catalogs(settings, store)
    catalogs = catalog_controller(settings.catalog, store, sources, catalog_client)
    app.state.catalogs = catalogs
    app.state.catalog_service = CatalogService(store, catalogs.enqueue)
    app.state.metrics = metrics
    app.state.drainer = drainer

    async def ready() -> bool:
        return controller_.ready and await bus.healthy()

    install_error_handlers(app)
    install_admin(app)
    app.include_router(benchmarks_router())
    app.include_router(logs_router())
    app.include_router(operations_router())
    app.include_router(discovery_router(backends))
    app.include_router(health_router(ready))
    return app
