"""P2P protobuf messages <-> core records, and a WorkerMetadata's fields to be checked."""

from __future__ import annotations

from flexinfer_common.mx_identity import SourceIdentity
from flexinfer_registry._generated.model_express import p2p_pb2
from flexinfer_registry.core.identity import WorkerFields
from flexinfer_registry.core.records import SourceRecord


def identity_from_proto(identity: p2p_pb2.SourceIdentity) -> SourceIdentity:
    """SourceIdentity message -> record."""
    return SourceIdentity(
        mx_version=identity.mx_version,
        mx_source_type=identity.mx_source_type,
        model_name=identity.model_name,
        backend_framework=identity.backend_framework,
        tensor_parallel_size=identity.tensor_parallel_size,
        pipeline_parallel_size=identity.pipeline_parallel_size,
        expert_parallel_size=identity.expert_parallel_size,
        dtype=identity.dtype,
        quantization=identity.quantization,
        extra_parameters=dict(identity.extra_parameters),
        revision=identity.revision,
        backend_framework_version=identity.backend_framework_version,
        torch_version=identity.torch_version,
        cuda_version=identity.cuda_version,
        triton_version=identity.triton_version,
        gpu_arch=identity.gpu_arch,
        compile_config_digest=identity.compile_config_digest,
    )


def identity_to_proto(identity: SourceIdentity) -> p2p_pb2.SourceIdentity:
    """Record -> SourceIdentity message."""
    return p2p_pb2.SourceIdentity(**identity.to_dict())


def millis(seconds: float) -> int:
    """Wire timestamps (updated_at) are Unix milliseconds."""
    return round(seconds * 1000)


def instance_ref(record: SourceRecord) -> p2p_pb2.SourceInstanceRef:
    """The lightweight ListSources entry of one worker."""
    ref = p2p_pb2.SourceInstanceRef(
        mx_source_id=record.mx_source_id,
        worker_id=record.worker_id,
        model_name=record.model_name,
        worker_rank=record.worker_rank,
        accelerator=record.accelerator,
        updated_at=millis(record.updated_at),
        topology=record.topology,
    )
    if record.source_load is not None:
        ref.source_load = record.source_load
    if record.training_step is not None:
        ref.training_step = record.training_step
    if record.layout_signature is not None:
        ref.layout_signature = record.layout_signature
    return ref


def worker_fields(worker: p2p_pb2.WorkerMetadata) -> WorkerFields:
    """The strings and counts of ``worker`` that :mod:`flexinfer_registry.core.identity`
    checks (the message itself is stored as the worker sent it)."""
    legacy = worker.tensors  # deprecated field 3, still sent by older clients
    current = worker.tensor_source.tensors
    tensors = [(t.name, t.dtype) for t in current] + [(t.name, t.dtype) for t in legacy]
    where = "worker.tensors" if legacy and not current else "worker.tensor_source.tensors"
    return WorkerFields(
        accelerator=worker.accelerator,
        agent_name=worker.agent_name,
        metadata_endpoint=worker.metadata_endpoint,
        worker_grpc_endpoint=worker.worker_grpc_endpoint,
        transfer_engine_session_id=worker.transfer_engine_session_id,
        artifact_id=worker.artifact_source.artifact_id,
        topology=dict(worker.topology),
        tensors=tensors,
        tensors_field=where,
    )
