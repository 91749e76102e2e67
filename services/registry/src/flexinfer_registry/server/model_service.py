"""model_express.model.ModelService: protobuf <-> core, every call admitted first.

Each RPC hands its model name to :class:`~flexinfer_registry.core.admission.Admission`
before it reads the store or the disk, so a hostile or disallowed name is answered with a
status (INVALID_ARGUMENT, PERMISSION_DENIED, NOT_FOUND; details in
:mod:`.status`) and leaves nothing behind.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc

from flexinfer_common.errors import (
    ConflictError,
    FlexInferError,
    InvalidSpecError,
    NotFoundError,
)
from flexinfer_registry._generated.model_express import model_pb2, model_pb2_grpc
from flexinfer_registry.core.downloads import DownloadRequest
from flexinfer_registry.core.records import Provider
from flexinfer_registry.core.service import RegistryCore
from flexinfer_registry.server.chunks import FileChunkBuilder, passthrough
from flexinfer_registry.server.status import abort


def _revision(request: Any) -> str | None:
    return request.revision if request.HasField("revision") and request.revision else None


def _provider(value: int) -> Provider:
    try:
        return Provider(value)
    except ValueError as exc:
        raise InvalidSpecError(f"unknown ModelProvider value {value}", field="provider") from exc


class ModelService(model_pb2_grpc.ModelServiceServicer):
    """model_express.model.ModelService."""

    def __init__(self, core: RegistryCore) -> None:
        self._core = core

    async def _admit(self, request: Any) -> None:
        """The request's model, provider and revision pass every rule (or the call ends)."""
        provider = _provider(request.provider)
        await self._core.admission.check_source(
            request.model_name, int(provider), _revision(request)
        )

    async def EnsureModelDownloaded(  # noqa: N802 (RPC names are fixed by the proto)
        self, request: model_pb2.ModelDownloadRequest, context: Any
    ) -> AsyncIterator[model_pb2.ModelStatusUpdate]:
        """Stream status updates until the model is DOWNLOADED or ERROR.

        A download that failed in this process ends, after its ERROR update, with the
        failure's status (RESOURCE_EXHAUSTED for a full cache disk, UNAVAILABLE for an
        unreachable source...) and details; one that failed on another replica is known
        here only by its message, and ends OK after the ERROR update."""
        try:
            await self._admit(request)
            download = DownloadRequest(
                name=request.model_name,
                provider=_provider(request.provider),
                revision=_revision(request),
                ignore_weights=request.ignore_weights,
            )
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
                if update.error is not None:
                    # ModelExpress clients stop at the ERROR update; the status after it
                    # tells the others why, with details.
                    raise update.error
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
            await self._admit(request)
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
            await self._admit(request)
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
        """Remove every cache entry of the model; success=false when absent or in use.

        Only the name is checked: an entry cached from a source no longer allowed must
        still be removable."""
        try:
            self._core.admission.check_name(request.model_name)
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
