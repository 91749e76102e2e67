"""Our model.proto/p2p.proto are byte-compatible with the modelexpress 0.7.0 package's."""

from __future__ import annotations

import modelexpress.model_pb2 as mx_model
import modelexpress.p2p_pb2 as mx_p2p
import pytest
from google.protobuf.message import Message

from flexinfer_registry._generated.model_express import model_pb2, p2p_pb2


@pytest.mark.parametrize(("ours", "theirs"), [(model_pb2, mx_model), (p2p_pb2, mx_p2p)])
def test_descriptors_are_byte_identical(ours: object, theirs: object) -> None:
    ours_pb = ours.DESCRIPTOR.serialized_pb  # type: ignore[attr-defined]
    assert ours_pb == theirs.DESCRIPTOR.serialized_pb  # type: ignore[attr-defined]
    assert ours.DESCRIPTOR.name == theirs.DESCRIPTOR.name  # type: ignore[attr-defined]


def _roundtrip(ours: Message, theirs_cls: type[Message]) -> None:
    data = ours.SerializeToString()
    theirs = theirs_cls.FromString(data)
    assert theirs.SerializeToString() == data
    back = type(ours).FromString(theirs.SerializeToString())
    assert back == ours


def test_messages_roundtrip_both_ways() -> None:
    _roundtrip(
        model_pb2.ModelStatusUpdate(
            model_name="m",
            status=model_pb2.ERROR,
            message="x",
            provider=model_pb2.S3,
            resolved_revision="abc",
        ),
        mx_model.ModelStatusUpdate,
    )
    _roundtrip(
        model_pb2.FileChunk(
            relative_path="a/b",
            data=b"\x00\x01",
            offset=2**40,
            total_size=2**41,
            is_last_chunk=True,
            is_last_file=True,
            commit_hash="c",
        ),
        mx_model.FileChunk,
    )
    identity = p2p_pb2.SourceIdentity(
        model_name="M", extra_parameters={"k": "v"}, tensor_parallel_size=8, gpu_arch="sm_90"
    )
    worker = p2p_pb2.WorkerMetadata(
        worker_rank=3,
        nixl_metadata=b"nixl",
        status=p2p_pb2.SOURCE_STATUS_READY,
        updated_at=1_700_000_000_000,
        topology={"node": "n"},
        tensor_source=p2p_pb2.TensorSourceMetadata(
            tensors=[p2p_pb2.TensorDescriptor(name="w", addr=2**63, size=10, dtype="bf16")]
        ),
    )
    _roundtrip(
        p2p_pb2.PublishMetadataRequest(identity=identity, worker=worker, worker_id="w1"),
        mx_p2p.PublishMetadataRequest,
    )
    _roundtrip(
        p2p_pb2.SourceInstanceRef(mx_source_id="s", source_load=0.5, training_step=0),
        mx_p2p.SourceInstanceRef,
    )
    _roundtrip(
        p2p_pb2.ListSourcesRequest(
            identity=identity, status_filter=p2p_pb2.SOURCE_STATUS_READY, worker_rank_filter=0
        ),
        mx_p2p.ListSourcesRequest,
    )


def test_optional_presence_survives() -> None:
    request = mx_p2p.UpdateStatusRequest(mx_source_id="s", source_load=0.0)
    parsed = p2p_pb2.UpdateStatusRequest.FromString(request.SerializeToString())
    assert parsed.HasField("source_load")
    assert not p2p_pb2.UpdateStatusRequest().HasField("source_load")
