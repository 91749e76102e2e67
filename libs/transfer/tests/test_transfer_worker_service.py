"""The WorkerService through modelexpress's own stubs: the manifest, and the mx_source_id /
worker_id validation that catches a stale discovery record."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
import modelexpress.p2p_pb2 as mx_p2p
import modelexpress.p2p_pb2_grpc as mx_p2p_grpc
import pytest
from modelexpress.metadata.worker_server import prepare_tensor_read

from flexinfer_common.mx_identity import SourceIdentity
from flexinfer_testing.traces import (
    assert_server_child,
    assert_trace_root,
    recording_provider,
    wait_for_spans,
)
from flexinfer_transfer.directory import RemoteTensor, SourceManifest
from flexinfer_transfer.k8s_service_directory import K8sServiceDirectory, K8sServiceSettings
from flexinfer_transfer.read_leases import ReadLeases
from flexinfer_transfer.selector import SourceCandidate
from flexinfer_transfer.worker_service import ServedWorker, serve_worker

SOURCE_ID = SourceIdentity(mx_version="0.7.0", model_name="Org/Served").mx_source_id
MANIFEST = SourceManifest(
    "agent-7", b"", [RemoteTensor("a", 2**63 + 1, 16, 0, "bf16"), RemoteTensor("b", 64, 8)], "cpu"
)


@pytest.fixture
def stub() -> Iterator[Any]:
    """A modelexpress WorkerService stub on a served worker."""
    worker = ServedWorker(SOURCE_ID, "w-7", 1, MANIFEST, metadata_endpoint="10.0.0.7:5556")
    server, port = serve_worker(worker, "127.0.0.1")
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield mx_p2p_grpc.WorkerServiceStub(channel)
    finally:
        server.stop(None)


def test_get_tensor_manifest(stub: Any) -> None:
    for request in (
        mx_p2p.GetTensorManifestRequest(mx_source_id=SOURCE_ID, worker_id="w-7"),
        mx_p2p.GetTensorManifestRequest(mx_source_id=SOURCE_ID),  # older targets omit it
    ):
        reply = stub.GetTensorManifest(request, timeout=10)
        assert [(t.name, t.addr, t.size, t.dtype) for t in reply.tensors] == [
            ("a", 2**63 + 1, 16, "bf16"),
            ("b", 64, 8, ""),
        ]
        assert (reply.mx_source_id, reply.worker_id, reply.worker_rank) == (SOURCE_ID, "w-7", 1)
        assert (reply.agent_name, reply.accelerator) == ("agent-7", "cpu")
        assert reply.metadata_endpoint == "10.0.0.7:5556"


STALE = grpc.StatusCode.FAILED_PRECONDITION


@pytest.mark.parametrize(
    ("request_fields", "code", "message"),
    [
        ({"mx_source_id": "0123456789abcdef"}, STALE, "mx_source_id mismatch"),
        ({"mx_source_id": SOURCE_ID, "worker_id": "w-old"}, STALE, "worker_id mismatch"),
        ({}, grpc.StatusCode.INVALID_ARGUMENT, "mx_source_id is required"),
    ],
)
def test_stale_or_empty_requests_are_refused(
    stub: Any, request_fields: dict[str, str], code: grpc.StatusCode, message: str
) -> None:
    with pytest.raises(grpc.RpcError) as caught:
        stub.GetTensorManifest(mx_p2p.GetTensorManifestRequest(**request_fields), timeout=10)
    assert caught.value.code() == code
    assert message in (caught.value.details() or "")


def test_read_leases_through_modelexpress_client() -> None:
    leases = ReadLeases()
    worker = ServedWorker(SOURCE_ID, "w-7", 1, MANIFEST)
    server, port = serve_worker(worker, "127.0.0.1", leases=leases)
    try:
        lease, _ = prepare_tensor_read(f"127.0.0.1:{port}", SOURCE_ID, worker_id="w-7")
        assert [t.name for t in lease.manifest.tensors] == ["a", "b"]
        assert leases.in_flight() == 1
        lease.release()
        assert leases.in_flight() == 0
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = mx_p2p_grpc.WorkerServiceStub(channel)
            with pytest.raises(grpc.RpcError) as unknown:
                stub.ReleaseTensorRead(
                    mx_p2p.ReleaseTensorReadRequest(mx_source_id=SOURCE_ID, lease_id="nope")
                )
            assert unknown.value.code() == grpc.StatusCode.NOT_FOUND
            assert leases.drain(timeout_s=0)  # nothing out: drained at once
            with pytest.raises(grpc.RpcError) as draining:
                stub.PrepareTensorRead(mx_p2p.PrepareTensorReadRequest(mx_source_id=SOURCE_ID))
            assert draining.value.code() == grpc.StatusCode.UNAVAILABLE
            with pytest.raises(grpc.RpcError) as artifact:
                stub.GetArtifactManifestHeader(
                    mx_p2p.GetArtifactManifestHeaderRequest(mx_source_id=SOURCE_ID)
                )
            assert artifact.value.code() == grpc.StatusCode.NOT_FOUND  # serves no artifacts
    finally:
        server.stop(None)


def test_leases_expire_and_a_drain_waits_for_readers() -> None:
    leases = ReadLeases(timeout_s=0.05)
    first = leases.prepare()
    assert leases.in_flight() == 1
    assert ReadLeases().drain(timeout_s=0)  # an empty table drains at once
    # A reader that never returns its lease blocks the drain only until the lease expires.
    assert leases.drain(timeout_s=5)
    with pytest.raises(KeyError):
        leases.release(first)
    busy = ReadLeases(timeout_s=60)
    busy.prepare()
    assert not busy.drain(timeout_s=0.01)  # gave up, and takes readers again:
    busy.release(busy.prepare())
    with pytest.raises(ValueError, match="positive"):
        ReadLeases(timeout_s=0)


def test_a_manifest_call_joins_the_targets_trace() -> None:
    """The k8s-service directory sends its span's traceparent; the WorkerService's span of
    GetTensorManifest is its child. Without a span the call starts no trace here."""
    server_provider, server_spans = recording_provider()
    worker = ServedWorker(SOURCE_ID, "w-7", 1, MANIFEST)
    server, port = serve_worker(worker, "127.0.0.1", tracer_provider=server_provider)
    identity = SourceIdentity(mx_version="0.7.0", model_name="Org/Served")
    directory = K8sServiceDirectory(
        identity, K8sServiceSettings(k8s_service_pattern=f"127.0.0.1:{port}")
    )
    candidate = SourceCandidate(SOURCE_ID, "", worker_rank=1)
    try:
        tracer = recording_provider()[0].get_tracer("target")
        with tracer.start_as_current_span("load from peers") as load:
            assert directory.manifest(candidate).agent_name == "agent-7"
        directory.manifest(candidate)
        traced, untraced = wait_for_spans(
            server_spans, "model_express.p2p.WorkerService/GetTensorManifest", 2
        )
    finally:
        server.stop(None)
    assert_server_child(traced, load.get_span_context())
    assert_trace_root(untraced, load.get_span_context())
