"""The scheduler's HTTP app: kube-scheduler's extender verbs over the placement core."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
from fastapi import FastAPI, Request, Response
from opentelemetry.sdk.trace.export import SpanExporter
from prometheus_client import CollectorRegistry, Counter, Gauge

from flexinfer_common.auth import AdminTokens, guard_paths, open_paths, resolve_admin_tokens
from flexinfer_common.placement import (
    BenchmarkSource,
    InMemoryBenchmarks,
    InMemoryTenantPods,
    PluginDeps,
    TenantPods,
    TenantShare,
    default_placement,
)
from flexinfer_common.serving import freeze_startup_heap
from flexinfer_common.telemetry import Telemetry, setup_telemetry
from flexinfer_common.web import health_router, install_error_handlers
from flexinfer_scheduler import openapi
from flexinfer_scheduler.adapters import kube
from flexinfer_scheduler.core.extender import Extender
from flexinfer_scheduler.core.nodes import NodeCache, NodeLookup
from flexinfer_scheduler.metrics import SchedulerMetrics
from flexinfer_scheduler.settings import SchedulerSettings
from flexinfer_scheduler.verbs import BodyLimits, ExtenderVerbs, VerbsPipeline

log = logging.getLogger(__name__)
EXTENDER_PATHS = frozenset({"/filter", "/prioritize", "/score"})


class MalformedCounter:
    """Counts malformed label, annotation and ConfigMap values (then treated as absent)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._counter = Counter(
            "flexinfer_scheduler_malformed_values",
            "Label, annotation or benchmark values that did not parse and were ignored",
            ["key"],
            registry=registry,
        )

    def report(self, key: str, value: str) -> None:
        """Count it and say which value."""
        self._counter.labels(key).inc()
        log.warning("ignoring malformed %s=%r", key, value[:100])


def _tenant_gauges(registry: CollectorRegistry) -> Callable[[str, TenantShare], None]:
    ratio = Gauge(
        "flexinfer_scheduler_tenant_usage_ratio",
        "A tenant's GPUs (with the pod being placed) over its quota",
        ["namespace", "tenant"],
        registry=registry,
    )
    adjustment = Gauge(
        "flexinfer_scheduler_tenant_score_adjustment",
        "The tenant fair-share term added to a pod's scores",
        ["namespace", "tenant"],
        registry=registry,
    )

    def observe(namespace: str, share: TenantShare) -> None:
        ratio.labels(namespace, share.tenant).set(share.usage_ratio)
        adjustment.labels(namespace, share.tenant).set(share.adjustment)

    return observe


def _install_auth(app: FastAPI, settings: SchedulerSettings) -> AdminTokens | None:
    """Admin auth as in every service; the tokens the extender verbs need (None: open)."""
    tokens = resolve_admin_tokens(settings, host=settings.host, telemetry=settings.telemetry)
    if tokens is None:
        return None
    unguarded = open_paths(settings.telemetry)
    if settings.extender_open:
        unguarded |= EXTENDER_PATHS
    guard_paths(app, tokens, lambda path: path not in unguarded)
    return None if settings.extender_open else tokens


NOT_SYNCED = (
    "the extender has not yet listed Nodes, ConfigMaps and Pods from the apiserver "
    "(waited {:.1f}s); retry shortly"
)


class SyncGate:
    """Holds extender requests until the apiserver informers have listed once (boundedly)."""

    def __init__(self, wait_s: float) -> None:
        self.wait_s = wait_s
        self.sources: kube.KubeSources | None = None
        self._open = True

    def close_until_synced(self, sources: kube.KubeSources) -> None:
        """Hold requests until ``sources`` have listed."""
        self.sources, self._open = sources, False

    async def passes(self) -> bool:
        """True at once when synced (the usual case); else after waiting, whether synced."""
        if self._open:
            return True
        assert self.sources is not None
        self._open = await self.sources.wait_synced(self.wait_s)
        return self._open

    def error(self) -> str:
        """What an extender request held too long is told."""
        return NOT_SYNCED.format(self.wait_s)


def _routes(app: FastAPI, verbs: ExtenderVerbs) -> None:
    # The OpenAPI's operations, and the verbs' answers where no pipeline serves them.
    @app.post("/filter", **openapi.FILTER)
    async def filter_nodes(request: Request) -> Response:
        """ExtenderArgs -> ExtenderFilterResult (passing nodes, failedNodes reasons)."""
        return (await verbs.filter(await request.body())).response()

    async def prioritize(request: Request) -> Response:
        """ExtenderArgs -> HostPriorityList (scores 0..10)."""
        return (await verbs.prioritize(await request.body())).response()

    app.post("/prioritize", **openapi.PRIORITIZE)(prioritize)
    app.post("/score", **openapi.SCORE)(prioritize)


def _pipeline(
    settings: SchedulerSettings,
    verbs: ExtenderVerbs,
    tokens: AdminTokens | None,
    telemetry: Telemetry,
) -> VerbsPipeline:
    """The verbs served by flexinfer_common.http1's protocol (which looks for
    ``app.pipeline``), with the app's auth, limits, request metrics and tracing."""
    provider = telemetry.tracer_provider
    return VerbsPipeline(
        verbs.by_path(),
        tokens=tokens,
        limits=BodyLimits(settings.max_body_bytes, settings.body_timeout_s),
        requests=telemetry.requests,
        tracer=None if provider is None else provider.get_tracer("flexinfer.scheduler"),
    )


def create_app(
    settings: SchedulerSettings,
    *,
    nodes: NodeLookup | None = None,
    benchmarks: BenchmarkSource | None = None,
    tenants: TenantPods | None = None,
    span_exporter: SpanExporter | None = None,
) -> FastAPI:
    """The scheduler app: /filter, /prioritize, /score, /healthz, /readyz and /metrics.

    ``span_exporter`` replaces the OTLP exporter when tracing is on (tests).

    With ``settings.kubernetes`` nodes, benchmarks and pods come from the apiserver's
    informers (started in the lifespan); otherwise from the given sources (empty by default).
    """
    gate = SyncGate(settings.sync_wait_s)

    async def ready() -> bool:
        return gate.sources is None or gate.sources.synced()

    app = FastAPI(
        title="FlexInfer scheduler",
        docs_url=None,
        redoc_url=None,
        lifespan=_lifespan(settings, gate),
        max_body_size=settings.max_body_bytes,
    )
    app.state.settings = settings
    tokens = _install_auth(app, settings)
    install_error_handlers(app)
    app.include_router(health_router(ready))
    telemetry = setup_telemetry(app, "scheduler", settings.telemetry, span_exporter=span_exporter)
    app.state.telemetry = telemetry
    sink = MalformedCounter(telemetry.registry)
    metrics = SchedulerMetrics(telemetry.registry)
    placement = default_placement(PluginDeps(weights=settings.weights))
    extender = Extender(
        placement,
        nodes if nodes is not None else NodeCache(),
        benchmarks if benchmarks is not None else InMemoryBenchmarks(),
        tenants if tenants is not None else InMemoryTenantPods(),
        settings.weights,
        sink,
        _tenant_gauges(telemetry.registry),
        on_rejections=metrics.rejected,
    )
    verbs = ExtenderVerbs(lambda: extender, sink, gate, metrics)
    _routes(app, verbs)
    app.pipeline = _pipeline(settings, verbs, tokens, telemetry)  # type: ignore[attr-defined]
    app.state.extender = extender
    app.state.sink = sink
    app.state.sync_gate = gate
    return app


async def _freeze_when_synced(sources: kube.KubeSources) -> None:
    # The informers' first lists (every Node, ConfigMap and Pod) live as long as the
    # process: freeze them with the rest of the startup heap once they are in.
    while not await sources.wait_synced(60):
        pass
    freeze_startup_heap()


def _lifespan(settings: SchedulerSettings, gate: SyncGate) -> Callable[[FastAPI], Any]:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if not settings.kubernetes:
            yield
            return
        sources = kube.KubeSources.connect(
            settings.kubernetes_host,
            settings.kubeconfig,
            app.state.sink,
            global_configmap=settings.benchmark_results_configmap,
            pods=settings.weights.tenant_fairshare_enabled,
        )
        extender: Extender = app.state.extender
        extender.use_sources(sources.node_lookup(), sources.benchmarks(), sources.tenants())
        gate.close_until_synced(sources)
        try:
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(sources.run)
                tasks.start_soon(_freeze_when_synced, sources)
                try:
                    yield
                finally:
                    tasks.cancel_scope.cancel()
        finally:
            await sources.close()

    return lifespan
