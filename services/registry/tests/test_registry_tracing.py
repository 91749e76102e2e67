"""W3C trace context over the registry's gRPC.

A traced registry's span of each call is the child of the caller's current span: the
same trace, the caller's span as (remote) parent. Checked through the ``flexinfer mx``
client, whose EnsureModelDownloaded goes over grpcio and whose StreamModelFiles goes over
the hand-written HTTP/2 client. A caller with no current span sends no ``traceparent``;
one with a span sends its ``traceparent`` and ``tracestate``, read off the metadata a real
gRPC server received.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanContext
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from flexinfer_common.serving import serve_in_background
from flexinfer_common.settings import TelemetrySettings
from flexinfer_registry._generated.model_express import health_pb2
from flexinfer_registry.app import create_app
from flexinfer_registry.client.mx_client import MxClient
from flexinfer_registry.settings import RegistrySettings
from flexinfer_registry.testing.fakes import OneProvider, ScriptedProvider
from flexinfer_testing.traces import (
    assert_server_child,
    assert_trace_root,
    recording_provider,
    wait_for_spans,
)

FILES = {"config.json": b"{}", "model.safetensors": bytes(range(256)) * 5000}
ENSURE = "model_express.model.ModelService/EnsureModelDownloaded"
STREAM = "model_express.model.ModelService/StreamModelFiles"


@pytest.fixture
async def traced_registry(tmp_path: Path) -> AsyncIterator[tuple[str, InMemorySpanExporter]]:
    """A registry with tracing on, its spans in memory: (gRPC address, exporter)."""
    exporter = InMemorySpanExporter()
    settings = RegistrySettings(
        port=0,
        grpc_port=0,
        cache_dir=tmp_path / "cache",
        telemetry=TelemetrySettings(otel_enabled=True),
    )
    provider = OneProvider(ScriptedProvider(FILES))
    app: Any = create_app(settings, providers=provider, span_exporter=exporter)
    async with serve_in_background(app):
        yield str(app.state.grpc_address), exporter


def _download_and_stream(address: str, name: str) -> int:
    """EnsureModelDownloaded then StreamModelFiles through MxClient; the chunks read."""
    with MxClient(address) as client:
        updates = list(client.ensure(name, 0, None, False))
        assert updates[-1]["status"] == "DOWNLOADED", updates
        return sum(1 for _ in client.stream(name, 0, None, chunk_size=4096))


async def test_the_registrys_spans_join_the_callers_trace(
    traced_registry: tuple[str, InMemorySpanExporter],
) -> None:
    address, server_spans = traced_registry
    provider, _ = recording_provider()
    tracer = provider.get_tracer("test client")

    def traced_call() -> SpanContext:
        with tracer.start_as_current_span("fetch weights") as span:
            assert _download_and_stream(address, "org/model") > 1
            return span.get_span_context()

    client = await asyncio.to_thread(traced_call)
    [ensure] = await asyncio.to_thread(wait_for_spans, server_spans, ENSURE)
    [stream] = await asyncio.to_thread(wait_for_spans, server_spans, STREAM)
    for span in (ensure, stream):
        assert_server_child(span, client)
        assert span.attributes is not None
        assert span.attributes["rpc.system"] == "grpc"
        assert span.attributes["rpc.grpc.status_code"] == 0
    assert stream.attributes is not None
    assert stream.attributes["rpc.method"] == "StreamModelFiles"

    # Without a current span the registry starts a trace of its own.
    await asyncio.to_thread(_download_and_stream, address, "org/model")
    _, untraced_ensure = await asyncio.to_thread(wait_for_spans, server_spans, ENSURE, 2)
    _, untraced_stream = await asyncio.to_thread(wait_for_spans, server_spans, STREAM, 2)
    assert_trace_root(untraced_ensure, client)
    assert_trace_root(untraced_stream, client)


async def test_a_refused_call_is_traced_with_its_status(
    traced_registry: tuple[str, InMemorySpanExporter],
) -> None:
    address, server_spans = traced_registry
    provider, _ = recording_provider()

    def traced_call() -> SpanContext:
        with provider.get_tracer("t").start_as_current_span("list") as span:
            with MxClient(address) as client, pytest.raises(Exception, match="not"):
                client.list_files("org/never-downloaded", 0, None)
            return span.get_span_context()

    client = await asyncio.to_thread(traced_call)
    name = "model_express.model.ModelService/ListModelFiles"
    [span] = await asyncio.to_thread(wait_for_spans, server_spans, name)
    assert_server_child(span, client)
    assert span.attributes is not None
    assert span.attributes["rpc.grpc.status_code"] == grpc.StatusCode.NOT_FOUND.value[0]


class MetadataRecorder:
    """A real gRPC server answering GetHealth, EnsureModelDownloaded and StreamModelFiles
    (no updates, no chunks) that records each call's metadata."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, str]]] = []

    def _record(self, method: str, context: Any) -> None:
        metadata = {k: v for k, v in context.invocation_metadata() if isinstance(v, str)}
        self.calls.append((method, metadata))

    def handlers(self) -> list[Any]:
        """The generic handlers of the two services."""

        async def health(request: Any, context: Any) -> Any:
            self._record("GetHealth", context)
            return health_pb2.HealthResponse(version="t", status="ok", uptime=1)

        def streaming(method: str) -> Any:
            async def call(request: Any, context: Any) -> AsyncIterator[Any]:
                self._record(method, context)
                for _ in ():
                    yield _

            return call

        def stream_handler(method: str) -> Any:
            return grpc.unary_stream_rpc_method_handler(
                streaming(method),
                request_deserializer=lambda b: b,
                response_serializer=lambda m: m.SerializeToString(),
            )

        return [
            grpc.method_handlers_generic_handler(
                "model_express.health.HealthService",
                {
                    "GetHealth": grpc.unary_unary_rpc_method_handler(
                        health,
                        request_deserializer=health_pb2.HealthRequest.FromString,
                        response_serializer=health_pb2.HealthResponse.SerializeToString,
                    )
                },
            ),
            grpc.method_handlers_generic_handler(
                "model_express.model.ModelService",
                {m: stream_handler(m) for m in ("EnsureModelDownloaded", "StreamModelFiles")},
            ),
        ]


def _three_calls(address: str) -> None:
    with MxClient(address, token="t0ken") as client:
        client.health()
        assert list(client.ensure("m", 0, None, False)) == []
        assert list(client.stream("m", 0, None)) == []


async def test_a_client_sends_traceparent_only_with_a_current_span() -> None:
    recorder = MetadataRecorder()
    server = grpc.aio.server()
    server.add_generic_rpc_handlers(recorder.handlers())
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        await asyncio.to_thread(_three_calls, f"127.0.0.1:{port}")
        provider, _ = recording_provider()

        # The caller's span continues a trace that carries a vendor's tracestate.
        upstream = TraceContextTextMapPropagator().extract(
            {"traceparent": f"00-{'ab' * 16}-{'cd' * 8}-01", "tracestate": "vendor=v1"}
        )

        def traced() -> SpanContext:
            tracer = provider.get_tracer("t")
            with tracer.start_as_current_span("caller", context=upstream) as span:
                _three_calls(f"127.0.0.1:{port}")
                return span.get_span_context()

        caller = await asyncio.to_thread(traced)
    finally:
        await server.stop(None)
    methods = ["GetHealth", "EnsureModelDownloaded", "StreamModelFiles"]
    assert [m for m, _ in recorder.calls] == methods * 2
    for _, metadata in recorder.calls[:3]:
        assert "traceparent" not in metadata, metadata
        assert "tracestate" not in metadata, metadata
        assert metadata["authorization"] == "Bearer t0ken"
    expected = f"00-{caller.trace_id:032x}-{caller.span_id:016x}-01"
    for method, metadata in recorder.calls[3:]:
        assert metadata.get("traceparent") == expected, method
        assert metadata.get("tracestate") == "vendor=v1", method
        assert metadata["authorization"] == "Bearer t0ken"


@pytest.mark.parametrize(
    "metadata",
    [
        (("traceparent", "not-a-traceparent"),),
        (("traceparent", f"00-{'0' * 32}-{'cd' * 8}-01"),),  # an all-zero trace id
        (("traceparent", f"ff-{'ab' * 16}-{'cd' * 8}-01"),),  # version ff is invalid
        (("tracestate", "vendor=v1"), ("trace-bin", b"\x00\x01")),
    ],
)
async def test_a_bad_traceparent_starts_a_trace_of_its_own(
    traced_registry: tuple[str, InMemorySpanExporter], metadata: Any
) -> None:
    address, server_spans = traced_registry
    async with grpc.aio.insecure_channel(address) as channel:
        get_health = channel.unary_unary(
            "/model_express.health.HealthService/GetHealth",
            request_serializer=health_pb2.HealthRequest.SerializeToString,
            response_deserializer=health_pb2.HealthResponse.FromString,
        )
        reply = await get_health(health_pb2.HealthRequest(), metadata=metadata, timeout=10)
    assert reply.status == "ok"
    name = "model_express.health.HealthService/GetHealth"
    [span] = await asyncio.to_thread(wait_for_spans, server_spans, name)
    assert_trace_root(span)
