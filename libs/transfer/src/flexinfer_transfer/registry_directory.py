"""RegistryDirectory: sources and manifests from the registry's P2pService (ModelExpress's
central metadata mode): ListSources(READY) for candidates, GetMetadata for one worker's
NIXL agent metadata and tensor descriptors. Each call carries the current span's
``traceparent`` (none without one) and, when given, the registry's P2P token as
``authorization: Bearer``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc

from flexinfer_common.grpc_tracing import trace_metadata
from flexinfer_transfer._generated import p2p_pb2
from flexinfer_transfer.directory import RemoteTensor, SourceManifest
from flexinfer_transfer.errors import RegistryAuthError
from flexinfer_transfer.p2p_stub import AUTH_CODES, p2p_stub, registry_metadata
from flexinfer_transfer.selector import SourceCandidate
from flexinfer_transfer.strategy import LoadContext


@dataclass(frozen=True)
class ArtifactLocation:
    """Where an artifact source serves its artifact (GetMetadata's ``artifact_source``)."""

    endpoint: str
    artifact_id: str
    accelerator: str


@dataclass
class RegistryDirectory:
    """A SourceDirectory over the registry's gRPC address."""

    address: str
    timeout_s: float = 10.0
    """Per call: the registry answers from memory or one store round trip."""
    token: str | None = field(default=None, repr=False)
    """The registry's P2P token (FLEXINFER_REGISTRY_P2P_TOKEN); None: a registry without
    auth. Kept out of ``repr`` so it never reaches a log."""

    def list_sources(self, ctx: LoadContext) -> list[SourceCandidate]:
        """READY workers of ``ctx.model_name`` at ``ctx.worker_rank``."""
        request = p2p_pb2.ListSourcesRequest(
            status_filter=p2p_pb2.SOURCE_STATUS_READY,
            model_name_filter=ctx.model_name,
            worker_rank_filter=ctx.worker_rank,
        )
        reply = self._call("ListSources", request)
        return [
            SourceCandidate(
                mx_source_id=ref.mx_source_id,
                worker_id=ref.worker_id,
                worker_rank=ref.worker_rank,
                accelerator=ref.accelerator,
                source_load=ref.source_load if ref.HasField("source_load") else None,
            )
            for ref in reply.instances
        ]

    def _call(self, method: str, request: Any) -> Any:
        """One unary P2pService call; a refused token becomes a RegistryAuthError that
        says what to configure (the raw RpcError's text is long and says neither)."""
        with grpc.insecure_channel(self.address) as channel:
            try:
                return getattr(p2p_stub(channel), method)(
                    request,
                    timeout=self.timeout_s,
                    metadata=trace_metadata(registry_metadata(self.token)),
                )
            except grpc.RpcError as exc:
                if not isinstance(exc, grpc.Call) or exc.code() not in AUTH_CODES:
                    raise
                code = exc.code()
                given = "its token" if self.token else "no token"
                raise RegistryAuthError(
                    f"the registry at {self.address} refused {method} ({given}): "
                    f"{code.name}: {exc.details()}; give this worker the registry's P2P token"
                ) from exc

    def _worker(self, candidate: SourceCandidate) -> Any:
        """The candidate's published WorkerMetadata; LookupError once the registry forgot it."""
        request = p2p_pb2.GetMetadataRequest(
            mx_source_id=candidate.mx_source_id, worker_id=candidate.worker_id
        )
        reply = self._call("GetMetadata", request)
        if not reply.found:
            raise LookupError(f"the registry no longer knows {candidate.key}")
        return reply.worker

    def artifact(self, candidate: SourceCandidate) -> ArtifactLocation:
        """Where the worker serves its artifact (its WorkerService) and which one."""
        worker = self._worker(candidate)
        if worker.WhichOneof("source_payload") != "artifact_source":
            raise LookupError(f"{candidate.key} publishes no artifact")
        if not worker.worker_grpc_endpoint:
            raise LookupError(f"{candidate.key} published no WorkerService endpoint")
        return ArtifactLocation(
            worker.worker_grpc_endpoint, worker.artifact_source.artifact_id, worker.accelerator
        )

    def manifest(self, candidate: SourceCandidate) -> SourceManifest:
        """The worker's published NIXL metadata and tensors."""
        worker = self._worker(candidate)
        if not worker.nixl_metadata:
            raise LookupError(f"{candidate.key} published no NIXL metadata")
        return SourceManifest(
            agent_name=worker.agent_name,
            agent_metadata=worker.nixl_metadata,
            tensors=[
                RemoteTensor(t.name, t.addr, t.size, t.device_id, t.dtype)
                for t in _descriptors(worker)
            ],
            accelerator=worker.accelerator,
        )


def _descriptors(worker: p2p_pb2.WorkerMetadata) -> Sequence[p2p_pb2.TensorDescriptor]:
    """The tensors of ``source_payload``, or the legacy field (older publishers)."""
    payload = worker.WhichOneof("source_payload")
    if payload == "tensor_source":
        return list(worker.tensor_source.tensors)
    if payload == "artifact_source":
        return []
    return list(worker.tensors)
