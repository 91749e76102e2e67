"""The publisher against the registry's real gRPC server (in-process): publish failures are
retried until the registry comes up, READY heartbeats keep updated_at fresh, and a clean
stop marks the worker STALE. The registry is read through modelexpress's own stubs."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import Any

import grpc
import modelexpress.p2p_pb2 as mx_p2p
import modelexpress.p2p_pb2_grpc as mx_p2p_grpc
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from flexinfer_common.mx_identity import SourceIdentity
from flexinfer_common.serving import serve_in_background
from flexinfer_common.settings import TelemetrySettings
from flexinfer_registry.app import create_app
from flexinfer_registry.settings import RegistrySettings
from flexinfer_testing.clients import wait_until
from flexinfer_testing.traces import (
    assert_server_child,
    assert_trace_root,
    recording_provider,
    wait_for_spans,
)
from flexinfer_transfer.directory import RemoteTensor, SourceManifest
from flexinfer_transfer.publisher import Publisher, PublisherSettings, worker_metadata
from flexinfer_transfer.registry_directory import RegistryDirectory
from flexinfer_transfer.source_identity import identity_to_proto
from flexinfer_transfer.strategy import LoadContext

IDENTITY = SourceIdentity(mx_version="0.7.0", model_name="Org/Published", dtype="BF16")
MANIFEST = SourceManifest("agent-w1", b"nixl-md", [RemoteTensor("w", 2**63 + 8, 64)], "cpu")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _workers(address: str, status: int) -> list[Any]:
    request = mx_p2p.ListSourcesRequest(
        identity=mx_p2p.SourceIdentity.FromString(identity_to_proto(IDENTITY).SerializeToString()),
        status_filter=status,
    )
    with grpc.insecure_channel(address) as channel:
        return list(mx_p2p_grpc.P2pServiceStub(channel).ListSources(request).instances)


async def test_publisher_retries_heartbeats_and_marks_stale(tmp_path: Path) -> None:
    port = _free_port()
    address = f"127.0.0.1:{port}"
    publisher = Publisher(
        address,
        IDENTITY,
        "w1",
        worker_metadata(MANIFEST, worker_rank=0),
        PublisherSettings(interval_s=0.2, retry_s=0.05, call_timeout_s=2),
        load=lambda: 2.0,  # reads in flight, reported with each heartbeat
    )
    publisher.start()
    try:
        # Nothing listens yet: failures are retried, the worker process carries on.
        await asyncio.to_thread(wait_until, lambda: publisher.failures >= 2, 30, "failures")
        assert not publisher.published.is_set()
        settings = RegistrySettings(port=0, grpc_port=port, cache_dir=tmp_path / "cache")
        app: Any = create_app(settings)
        async with serve_in_background(app):
            await asyncio.to_thread(publisher.published.wait, 30)
            assert publisher.mx_source_id == IDENTITY.mx_source_id
            (first,) = await asyncio.to_thread(_workers, address, mx_p2p.SOURCE_STATUS_READY)
            assert (first.worker_id, first.mx_source_id) == ("w1", IDENTITY.mx_source_id)

            def refreshed() -> bool:
                now = _workers(address, mx_p2p.SOURCE_STATUS_READY)
                return (
                    publisher.heartbeats >= 2
                    and now[0].updated_at > first.updated_at
                    and now[0].HasField("source_load")
                    and now[0].source_load == 2.0
                )

            await asyncio.to_thread(wait_until, refreshed, 30, "heartbeats")
            await asyncio.to_thread(publisher.stop)
            assert await asyncio.to_thread(_workers, address, mx_p2p.SOURCE_STATUS_READY) == []
            (stale,) = await asyncio.to_thread(_workers, address, mx_p2p.SOURCE_STATUS_STALE)
            assert stale.worker_id == "w1"
    finally:
        await asyncio.to_thread(publisher.stop)


def test_worker_metadata_dual_writes_the_tensors() -> None:
    worker = worker_metadata(MANIFEST, worker_rank=3)
    assert worker.WhichOneof("source_payload") == "tensor_source"
    assert list(worker.tensors) == list(worker.tensor_source.tensors)
    (tensor,) = worker.tensors
    assert (tensor.name, tensor.addr, tensor.size) == ("w", 2**63 + 8, 64)
    assert (worker.worker_rank, worker.agent_name, worker.nixl_metadata) == (
        3,
        "agent-w1",
        b"nixl-md",
    )


P2P = "model_express.p2p.P2pService"
PUBLISH = f"{P2P}/PublishMetadata"
UPDATE = f"{P2P}/UpdateStatus"


async def test_publication_and_stop_join_their_callers_traces(tmp_path: Path) -> None:
    """The registry's spans of PublishMetadata and of stop's UpdateStatus(STALE) are the
    children of the spans current where start and stop were called; the heartbeats,
    sent from the publisher's own thread with no span, carry no trace context. A target's
    ListSources and GetMetadata (RegistryDirectory) join the target's span."""
    server_spans = InMemorySpanExporter()
    settings = RegistrySettings(
        port=0,
        grpc_port=0,
        cache_dir=tmp_path / "cache",
        telemetry=TelemetrySettings(otel_enabled=True),
    )
    app: Any = create_app(settings, span_exporter=server_spans)
    tracer = recording_provider()[0].get_tracer("test worker")
    async with serve_in_background(app):
        publisher = Publisher(
            str(app.state.grpc_address),
            IDENTITY,
            "w-traced",
            worker_metadata(MANIFEST, worker_rank=0),
            PublisherSettings(interval_s=0.1, retry_s=0.05, call_timeout_s=5),
        )
        with tracer.start_as_current_span("load weights") as load:
            publisher.start()
        try:
            await asyncio.to_thread(wait_until, lambda: publisher.heartbeats >= 2, 30, "beats")
            # A target's discovery through the registry joins the target's trace too.
            directory = RegistryDirectory(str(app.state.grpc_address))

            def discover() -> str:
                [found] = directory.list_sources(LoadContext(tmp_path, model_name="Org/Published"))
                return directory.manifest(found).agent_name

            with tracer.start_as_current_span("pick a peer") as pick:
                # A blocking client off the loop the registry serves on; to_thread keeps the span.
                assert await asyncio.to_thread(discover) == "agent-w1"
        finally:
            with tracer.start_as_current_span("shut down") as shutdown:
                await asyncio.to_thread(publisher.stop)  # to_thread carries the context
        [published] = await asyncio.to_thread(wait_for_spans, server_spans, PUBLISH)
        updates = await asyncio.to_thread(wait_for_spans, server_spans, UPDATE, 3)
        [listed] = await asyncio.to_thread(wait_for_spans, server_spans, f"{P2P}/ListSources")
        [read] = await asyncio.to_thread(wait_for_spans, server_spans, f"{P2P}/GetMetadata")
    assert_server_child(published, load.get_span_context())
    assert_server_child(listed, pick.get_span_context())
    assert_server_child(read, pick.get_span_context())
    *heartbeats, stale = updates
    assert_server_child(stale, shutdown.get_span_context())
    for beat in heartbeats:
        assert_trace_root(beat, load.get_span_context(), shutdown.get_span_context())
