"""Telemetry bootstrap: Prometheus metrics and OpenTelemetry traces for a FastAPI app.

Each app gets its own CollectorRegistry, because the embedded stack runs several services in
one process and the default global registry would reject their identical metric names.
Services register their own metrics on ``Telemetry.registry``.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import PlainTextResponse, Response
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder
from prometheus_fastapi_instrumentator import Instrumentator

from flexinfer_common.http_metrics import HttpRequestMetrics
from flexinfer_common.settings import TelemetrySettings

log = logging.getLogger(__name__)

METRICS_PATH = "/metrics"
SD_ENGINES_PATH = "/v1/sd/engines"
"""The controller's Prometheus HTTP service discovery of engine replicas (read-only, and
open exactly when /metrics is)."""
_UNTRACKED = [METRICS_PATH, "/healthz", "/readyz"]
_EXPOSITION = {"schema": {"type": "string"}}


@dataclass(frozen=True)
class Telemetry:
    """What ``setup_telemetry`` installed on an app."""

    service: str
    registry: CollectorRegistry
    tracer_provider: TracerProvider | None
    requests: HttpRequestMetrics | None = field(default=None)
    """The request metrics' recorder, where the app's requests are instrumented."""

    @property
    def tracing(self) -> bool:
        """Whether requests are traced."""
        return self.tracer_provider is not None


def setup_telemetry(
    app: FastAPI,
    service: str,
    settings: TelemetrySettings,
    *,
    instrument_requests: bool = True,
    span_exporter: SpanExporter | None = None,
) -> Telemetry:
    """Expose /metrics (per-app registry) and, when enabled, export OTel traces.

    ``span_exporter`` replaces the OTLP exporter (an in-process collector, or tests).
    """
    registry = CollectorRegistry(auto_describe=True)
    requests = None
    if settings.metrics_enabled:
        if instrument_requests:
            requests = _instrument(app, registry)
        app.include_router(metrics_router(registry))
    provider = None
    if settings.otel_enabled:
        provider = _setup_tracing(app, service, settings, span_exporter)
    return Telemetry(service, registry, provider, requests)


def _instrument(app: FastAPI, registry: CollectorRegistry) -> HttpRequestMetrics:
    """The instrumentator's middleware on ``app``, recording into families that requests
    served without ASGI are recorded in too."""
    instrumentator = Instrumentator(
        excluded_handlers=_UNTRACKED, registry=registry, should_group_status_codes=False
    )
    requests = HttpRequestMetrics(registry)
    instrumentator.add(requests.instrumentation)
    instrumentator.instrument(app)
    return requests


def metrics_router(registry: CollectorRegistry) -> APIRouter:
    """GET /metrics: ``registry`` in the Prometheus text format (OpenMetrics when asked)."""
    router = APIRouter(tags=["telemetry"])

    @router.get(
        METRICS_PATH,
        response_class=PlainTextResponse,
        responses={
            200: {
                "description": "the metrics, in the format the Accept header asks for",
                "content": {"text/plain": _EXPOSITION, "application/openmetrics-text": _EXPOSITION},
            }
        },
    )
    async def metrics(request: Request) -> Response:
        """Prometheus metrics of this process (scraped by Prometheus)."""
        encoder, content_type = choose_encoder(request.headers.get("accept", ""))
        return Response(encoder(registry), media_type=content_type)

    return router


def _setup_tracing(
    app: FastAPI, service: str, settings: TelemetrySettings, exporter: SpanExporter | None
) -> TracerProvider:
    from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

    attributes = {"service.name": f"flexinfer-{service}"}
    if settings.service_namespace:
        attributes["service.namespace"] = settings.service_namespace
    provider = TracerProvider(resource=Resource.create(attributes))
    if exporter is not None:
        # An in-process exporter (tests, an embedded collector) takes each span as it ends.
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    elif (otlp := otlp_exporter(settings)) is not None:
        provider.add_span_processor(BatchSpanProcessor(otlp))
    else:
        log.warning("tracing is on but no OTLP endpoint is set: spans are not exported")
    FastAPIInstrumentor.instrument_app(
        app, tracer_provider=provider, excluded_urls="metrics,healthz,readyz"
    )
    return provider


OTLP_ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
"""The standard variables that name a collector; the exporter reads them (and the other
OTEL_EXPORTER_OTLP_* ones: headers, timeout, compression, certificates) itself."""


def otlp_exporter(settings: TelemetrySettings) -> SpanExporter | None:
    """OTLP over HTTP/protobuf to ``otel_endpoint`` (the full traces URL), else to what the
    standard OTEL_EXPORTER_OTLP_* variables say; None when neither names a collector."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    if settings.otel_endpoint:
        return OTLPSpanExporter(endpoint=settings.otel_endpoint)
    if any(os.environ.get(name) for name in OTLP_ENDPOINT_VARIABLES):
        return OTLPSpanExporter()
    return None
