"""ModelService and P2pService servicers: protobuf <-> core translations, errors -> statuses."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any, NoReturn

import grpc

from flexinfer_common.errors import (
    ConfigError,
    ConflictError,
    FlexInferError,
    InvalidSpecError,
    NotFoundError,
    PermanentError,
    TemporaryError,
)
from flexinfer_registry._generated.model_express import (
    model_pb2,
    model_pb2_grpc,
    p2p_pb2,
    p2p_pb2_grpc,
)
from flexinfer_registry.core.downloads import DownloadRequest
from flexinfer_registry.core.records import (
    ModelStatus,
    Provider,
    SourceIdentity,
    SourceRecord,
    SourceStatus,
)
from flexinfer_registry.core.service import RegistryCore
from flexinfer_registry.core.sources import ListFilter, Publication
from flexinfer_registry.server.chunks import FileChunkBuilder, passthrough

log = logging.getLogger(__name__)

_CODES: tuple[tuple[type[FlexInferError], grpc.StatusCode], ...] = (
    (InvalidSpecError, grpc.StatusCode.INVALID_ARGUMENT),
    (ConfigError, grpc.StatusCode.INVALID_ARGUMENT),
    (NotFoundError, grpc.StatusCode.NOT_FOUND),
    (ConflictError, grpc.StatusCode.FAILED_PRECONDITION),
    (PermanentError, grpc.StatusCode.FAILED_PRECONDITION),
    (TemporaryError, grpc.StatusCode.UNAVAILABLE),
)


def status_code(exc: FlexInferError) -> grpc.StatusCode:
    """The gRPC status for one of our errors."""
    for kind, code in _CODES:
        if isinstance(exc, kind):
            return code
    return grpc.StatusCode.INTERNAL


async def abort(context: Any, exc: FlexInferError) -> NoReturn:
    """End the call with the error's status and its message as details."""
    await context.abort(status_code(exc), str(exc)[:1000])
    raise AssertionError("unreachable")  # context.abort raises


def _revision(request: Any) -> str | None:
    return request.revision if request.HasField("revision") and request.revision else None


def _source_status(value: int) -> SourceStatus:
    try:
        return SourceStatus(value)
    except ValueError as exc:
        raise InvalidSpecError(f"unknown SourceStatus value {value}", field="status") from exc


def _provider(value: int) -> Provider:
    try:
        return Provider(value)
    except ValueError as exc:
        raise InvalidSpecError(f"unknown ModelProvider value {value}", field="provider") from exc


class ModelService(model_pb2_grpc.ModelServiceServicer):
    """model_express.model.ModelService."""

    def __init__(self, core: RegistryCore) -> None:
        self._core = core

    async def EnsureModelDownloaded(  # noqa: N802 (RPC names are fixed by the proto)
        self, request: model_pb2.ModelDownloadRequest, context: Any
    ) -> AsyncIterator[model_pb2.ModelStatusUpdate]:
        """Stream status updates until the model is DOWNLOADED or ERROR."""
        try:
            download = DownloadRequest(
                name=request.model_name,
                provider=_provider(request.provider),
                revision=_revision(request),
                ignore_weights=request.ignore_weights,
            )
            download.key  # noqa: B018 (validates the name before anything starts)
            async for update in self._core.tracker.ensure(download):
                message = model_pb2.ModelStatusUpdate(
                    model_name=update.name,
                    status=update.status.name,
                    provider=update.provider.name,
                )
                if update.message is not None:
                    message.message = update.message
                if update.resolved_revision is not None:
                    message.resolved_revision = update.resolved_revision
                yield message
        except FlexInferError as exc:
            await abort(context, exc)

    async def StreamModelFiles(  # noqa: N802
        self, request: model_pb2.ModelFilesRequest, context: Any
    ) -> AsyncIterator[bytes]:
        """Stream the cached model's files in chunks (1 MiB unless asked otherwise).

        Yields FileChunk messages already encoded, each chunk read from its file straight
        into its message (see :mod:`.chunks`); the server registers this method with a
        pass-through serializer (:func:`add_model_service`).
        """
        files = self._core.files
        try:
            model = await files.find(request.model_name, _revision(request), request.ignore_weights)
            chosen = files.select(model, list(request.file_selector.paths), request.ignore_weights)
            if not chosen:
                raise NotFoundError(f"model {request.model_name[:200]!r} has no files to stream")
            size = self._core.chunk_size(request.chunk_size)
            async for chunk in files.stream(model, chosen, size):
                builder = FileChunkBuilder(chunk.header)
                await chunk.read_into(builder.data)
                yield builder.build()
        except FlexInferError as exc:
            await abort(context, exc)

    async def ListModelFiles(  # noqa: N802
        self, request: model_pb2.ModelFilesRequest, context: Any
    ) -> model_pb2.ModelFileList:
        """The cached model's files and sizes."""
        files = self._core.files
        try:
            model = await files.find(request.model_name, _revision(request), request.ignore_weights)
            chosen = files.select(model, list(request.file_selector.paths), request.ignore_weights)
        except FlexInferError as exc:
            await abort(context, exc)
        return model_pb2.ModelFileList(
            model_name=request.model_name,
            files=[model_pb2.ModelFileInfo(relative_path=f.path, size=f.size) for f in chosen],
            total_size=sum(f.size for f in chosen),
        )

    async def DeleteModel(  # noqa: N802
        self, request: model_pb2.DeleteModelRequest, context: Any
    ) -> model_pb2.DeleteModelResponse:
        """Remove every cache entry of the model; success=false when absent or in use."""
        try:
            keys = await self._core.remover.delete_model(request.model_name)
        except InvalidSpecError as exc:
            await abort(context, exc)
        except (NotFoundError, ConflictError) as exc:
            return model_pb2.DeleteModelResponse(success=False, message=str(exc))
        return model_pb2.DeleteModelResponse(
            success=True, message=f"deleted {len(keys)} cache entries"
        )


def add_model_service(servicer: ModelService, server: Any) -> None:
    """Register ModelService as the generated code does, but with StreamModelFiles's
    messages passed through as the bytes the servicer already encoded."""
    handlers = {
        "EnsureModelDownloaded": grpc.unary_stream_rpc_method_handler(
            servicer.EnsureModelDownloaded,
            request_deserializer=model_pb2.ModelDownloadRequest.FromString,
            response_serializer=model_pb2.ModelStatusUpdate.SerializeToString,
        ),
        "StreamModelFiles": grpc.unary_stream_rpc_method_handler(
            servicer.StreamModelFiles,
            request_deserializer=model_pb2.ModelFilesRequest.FromString,
            response_serializer=passthrough,
        ),
        "ListModelFiles": grpc.unary_unary_rpc_method_handler(
            servicer.ListModelFiles,
            request_deserializer=model_pb2.ModelFilesRequest.FromString,
            response_serializer=model_pb2.ModelFileList.SerializeToString,
        ),
        "DeleteModel": grpc.unary_unary_rpc_method_handler(
            servicer.DeleteModel,
            request_deserializer=model_pb2.DeleteModelRequest.FromString,
            response_serializer=model_pb2.DeleteModelResponse.SerializeToString,
        ),
    }
    service = "model_express.model.ModelService"
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, handlers),))
    server.add_registered_method_handlers(service, handlers)


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


def _millis(seconds: float) -> int:
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
        updated_at=_millis(record.updated_at),
        topology=record.topology,
    )
    if record.source_load is not None:
        ref.source_load = record.source_load
    if record.training_step is not None:
        ref.training_step = record.training_step
    if record.layout_signature is not None:
        ref.layout_signature = record.layout_signature
    return ref


class P2pService(p2p_pb2_grpc.P2pServiceServicer):
    """model_express.p2p.P2pService."""

    def __init__(self, core: RegistryCore) -> None:
        self._core = core

    async def PublishMetadata(  # noqa: N802
        self, request: p2p_pb2.PublishMetadataRequest, context: Any
    ) -> p2p_pb2.PublishMetadataResponse:
        """Store a worker's metadata; answers the source id."""
        try:
            worker = request.worker
            publication = Publication(
                identity=identity_from_proto(request.identity),
                worker_id=request.worker_id,
                worker_rank=worker.worker_rank,
                status=_source_status(worker.status),
                metadata=worker.SerializeToString(),
                accelerator=worker.accelerator,
                topology=dict(worker.topology),
                pod_name=request.pod_name,
                pod_uid=request.pod_uid,
                pod_namespace=request.pod_namespace,
            )
            record = await self._core.sources.publish(publication)
        except FlexInferError as exc:
            await abort(context, exc)
        return p2p_pb2.PublishMetadataResponse(
            success=True,
            message="published",
            mx_source_id=record.mx_source_id,
            worker_id=record.worker_id,
        )

    async def ListSources(  # noqa: N802
        self, request: p2p_pb2.ListSourcesRequest, context: Any
    ) -> p2p_pb2.ListSourcesResponse:
        """Workers of a source (READY ones only while their heartbeat is fresh)."""

        def opt(name: str) -> Any:
            return getattr(request, name) if request.HasField(name) else None

        try:
            status = opt("status_filter")
            min_updated = opt("min_updated_at")
            query = ListFilter(
                identity=identity_from_proto(request.identity)
                if request.HasField("identity")
                else None,
                status=None if status is None else _source_status(status),
                model_name=opt("model_name_filter"),
                worker_rank=opt("worker_rank_filter"),
                min_training_step=opt("min_training_step"),
                min_updated_at=None if min_updated is None else min_updated / 1000.0,
                limit=opt("limit"),
            )
            found = await self._core.sources.list(query)
        except FlexInferError as exc:
            await abort(context, exc)
        return p2p_pb2.ListSourcesResponse(instances=[instance_ref(r) for r in found])

    async def GetMetadata(  # noqa: N802
        self, request: p2p_pb2.GetMetadataRequest, context: Any
    ) -> p2p_pb2.GetMetadataResponse:
        """One worker's full metadata (found=false when unknown)."""
        try:
            record = await self._core.sources.get(request.mx_source_id, request.worker_id)
        except FlexInferError as exc:
            await abort(context, exc)
        if record is None:
            return p2p_pb2.GetMetadataResponse(
                found=False, mx_source_id=request.mx_source_id, worker_id=request.worker_id
            )
        worker = p2p_pb2.WorkerMetadata.FromString(record.metadata)
        worker.status = int(record.status)
        worker.updated_at = _millis(record.updated_at)
        return p2p_pb2.GetMetadataResponse(
            found=True,
            worker=worker,
            mx_source_id=record.mx_source_id,
            worker_id=record.worker_id,
            identity=identity_to_proto(record.identity),
        )

    async def UpdateStatus(  # noqa: N802
        self, request: p2p_pb2.UpdateStatusRequest, context: Any
    ) -> p2p_pb2.UpdateStatusResponse:
        """Heartbeat / status change; stores source_load when sent."""
        load = request.source_load if request.HasField("source_load") else None
        try:
            ok = await self._core.sources.update_status(
                request.mx_source_id,
                request.worker_id,
                request.worker_rank,
                _source_status(request.status),
                load,
            )
        except FlexInferError as exc:
            await abort(context, exc)
        if not ok:
            return p2p_pb2.UpdateStatusResponse(
                success=False,
                message=f"unknown worker {request.worker_id[:100]!r} of source "
                f"{request.mx_source_id[:40]!r}; publish metadata first",
            )
        return p2p_pb2.UpdateStatusResponse(success=True, message="updated")


__all__ = ["ModelService", "ModelStatus", "P2pService", "abort", "add_model_service", "status_code"]
