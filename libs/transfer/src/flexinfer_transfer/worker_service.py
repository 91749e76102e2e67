"""WorkerService (p2p.proto): a source worker serves its own tensor manifest.

Targets of the decentralized ``k8s-service`` backend (and of MX_P2P_METADATA=1) call
GetTensorManifest on the worker instead of asking the registry. The request names the
``mx_source_id`` the target computed and, optionally, the runtime ``worker_id`` it
selected; either differing answers FAILED_PRECONDITION, which is how a target notices a
stale discovery record whose endpoint a new process (another model revision, a restarted
worker) has since taken. PrepareTensorRead/ReleaseTensorRead hand out read leases (what
modelexpress targets call), see read_leases.py. The artifact RPCs (manifest header,
chunk pages, prepare/release a chunk) are answered by an ArtifactServer when the worker
serves artifacts (artifact_server.py), NOT_FOUND otherwise.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc
from opentelemetry.trace import TracerProvider

from flexinfer_common.grpc_tracing import TracingInterceptor
from flexinfer_transfer._generated import p2p_pb2, p2p_pb2_grpc
from flexinfer_transfer.artifact_server import ArtifactRequestError, ArtifactServer
from flexinfer_transfer.directory import SourceManifest
from flexinfer_transfer.publisher import descriptors
from flexinfer_transfer.read_leases import DrainingError, ReadLeases

_R = TypeVar("_R")


@dataclass(frozen=True)
class ServedWorker:
    """What GetTensorManifest answers for this worker."""

    mx_source_id: str
    worker_id: str
    worker_rank: int
    manifest: SourceManifest
    metadata_endpoint: str = ""
    """``host:port`` of the NIXL agent's metadata listener, where it runs one."""


class WorkerServicer(p2p_pb2_grpc.WorkerServiceServicer):
    """model_express.p2p.WorkerService for one worker."""

    def __init__(
        self,
        worker: ServedWorker,
        leases: ReadLeases | None = None,
        artifacts: ArtifactServer | None = None,
    ) -> None:
        self.worker = worker
        self.leases = leases or ReadLeases()
        self.artifacts = artifacts
        self._response = p2p_pb2.GetTensorManifestResponse(
            tensors=descriptors(worker.manifest),
            mx_source_id=worker.mx_source_id,
            metadata_endpoint=worker.metadata_endpoint,
            agent_name=worker.manifest.agent_name,
            worker_rank=worker.worker_rank,
            accelerator=worker.manifest.accelerator,
            worker_id=worker.worker_id,
        )

    def GetTensorManifest(  # noqa: N802
        self, request: p2p_pb2.GetTensorManifestRequest, context: grpc.ServicerContext
    ) -> p2p_pb2.GetTensorManifestResponse:
        """This worker's tensors, once the request's source and worker ids match."""
        self._validate(request, context)
        return self._response

    def PrepareTensorRead(  # noqa: N802
        self, request: p2p_pb2.PrepareTensorReadRequest, context: grpc.ServicerContext
    ) -> p2p_pb2.PrepareTensorReadResponse:
        """A read lease and the manifest; UNAVAILABLE while the source drains."""
        self._validate(request, context)
        try:
            lease = self.leases.prepare()
        except DrainingError as exc:
            context.abort(grpc.StatusCode.UNAVAILABLE, str(exc))
        return p2p_pb2.PrepareTensorReadResponse(lease_id=lease, manifest=self._response)

    def ReleaseTensorRead(  # noqa: N802
        self, request: p2p_pb2.ReleaseTensorReadRequest, context: grpc.ServicerContext
    ) -> p2p_pb2.ReleaseTensorReadResponse:
        """Return a lease; NOT_FOUND when unknown or expired."""
        self._validate(request, context)
        try:
            self.leases.release(request.lease_id)
        except KeyError:
            context.abort(
                grpc.StatusCode.NOT_FOUND,
                f"tensor read lease not found or expired: {request.lease_id[:64]}",
            )
        return p2p_pb2.ReleaseTensorReadResponse()

    def GetArtifactManifestHeader(  # noqa: N802
        self, request: p2p_pb2.GetArtifactManifestHeaderRequest, context: grpc.ServicerContext
    ) -> p2p_pb2.GetArtifactManifestHeaderResponse:
        """An artifact's identity, counts and file table."""
        return self._artifact(lambda a: a.header(request), context)

    def GetArtifactManifestChunks(  # noqa: N802
        self, request: p2p_pb2.GetArtifactManifestChunksRequest, context: grpc.ServicerContext
    ) -> p2p_pb2.GetArtifactManifestChunksResponse:
        """One page of an artifact's chunk table."""
        return self._artifact(lambda a: a.chunk_page(request), context)

    def PrepareArtifactChunk(  # noqa: N802
        self, request: p2p_pb2.PrepareArtifactChunkRequest, context: grpc.ServicerContext
    ) -> p2p_pb2.PrepareArtifactChunkResponse:
        """One chunk read into registered DRAM, lent under a lease."""
        return self._artifact(lambda a: a.prepare(request), context)

    def ReleaseArtifactChunk(  # noqa: N802
        self, request: p2p_pb2.ReleaseArtifactChunkRequest, context: grpc.ServicerContext
    ) -> p2p_pb2.ReleaseArtifactChunkResponse:
        """Return a prepared chunk's lease."""
        return self._artifact(lambda a: a.release(request), context)

    def _artifact(
        self, answer: Callable[[ArtifactServer], _R], context: grpc.ServicerContext
    ) -> _R:
        try:
            if self.artifacts is None:
                raise ArtifactRequestError(
                    grpc.StatusCode.NOT_FOUND, "this worker serves no artifacts"
                )
            return answer(self.artifacts)
        except ArtifactRequestError as exc:
            context.abort(exc.code, str(exc))
            raise  # abort raised already; this line only tells the type checker

    def _validate(self, request: Any, context: grpc.ServicerContext) -> None:
        if not request.mx_source_id:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "mx_source_id is required")
        if request.mx_source_id != self.worker.mx_source_id:
            context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"mx_source_id mismatch: expected {self.worker.mx_source_id}, "
                f"got {request.mx_source_id[:64]}",
            )
        if request.HasField("worker_id") and request.worker_id != self.worker.worker_id:
            context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"worker_id mismatch: expected {self.worker.worker_id}, "
                f"got {request.worker_id[:128]}",
            )


def serve_worker(
    worker: ServedWorker,
    host: str = "0.0.0.0",
    port: int = 0,
    leases: ReadLeases | None = None,
    artifacts: ArtifactServer | None = None,
    tracer_provider: TracerProvider | None = None,
) -> tuple[Any, int]:
    """A started gRPC server with the WorkerService; returns (server, bound port).

    Each call is a span under the caller's ``traceparent``, from ``tracer_provider`` (the
    global one when None: a no-op unless the process set one, which still passes the
    caller's trace on to spans the handler starts)."""
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=4),
        interceptors=[TracingInterceptor(tracer_provider)],
    )
    p2p_pb2_grpc.add_WorkerServiceServicer_to_server(  # type: ignore[no-untyped-call]
        WorkerServicer(worker, leases, artifacts), server
    )
    bound = server.add_insecure_port(f"{host}:{port}")
    if bound == 0:
        raise OSError(f"cannot bind the WorkerService to {host}:{port}")
    server.start()
    return server, bound
