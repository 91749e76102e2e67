"""model_express.p2p.P2pService: protobuf <-> core; the core checks every identity."""

from __future__ import annotations

from typing import Any

from flexinfer_common.errors import FlexInferError, InvalidSpecError
from flexinfer_registry._generated.model_express import p2p_pb2, p2p_pb2_grpc
from flexinfer_registry.core.records import SourceStatus
from flexinfer_registry.core.service import RegistryCore
from flexinfer_registry.core.sources import ListFilter, Publication
from flexinfer_registry.server.p2p_convert import (
    identity_from_proto,
    identity_to_proto,
    instance_ref,
    millis,
    worker_fields,
)
from flexinfer_registry.server.status import abort


def _source_status(value: int) -> SourceStatus:
    try:
        return SourceStatus(value)
    except ValueError as exc:
        raise InvalidSpecError(f"unknown SourceStatus value {value}", field="status") from exc


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
                worker=worker_fields(worker),
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
        worker.updated_at = millis(record.updated_at)
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
