"""The decentralized ``k8s-service`` metadata backend: no registry, a Kubernetes Service.

Each tensor-parallel rank's sources sit behind a Service; the target computes the
``mx_source_id`` itself and calls GetTensorManifest on the Service, where kube-proxy picks
a ready pod. A pod of another revision (a rolling update) answers FAILED_PRECONDITION;
the call is retried on a fresh channel, so kube-proxy picks again, up to
MX_K8S_SOURCE_RETRIES times. The NIXL metadata comes from the pod's listener
(``metadata_endpoint``), so the target's agent needs its own listener too.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import grpc
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from flexinfer_common.grpc_tracing import trace_metadata
from flexinfer_common.mx_identity import SourceIdentity
from flexinfer_transfer._generated import p2p_pb2, p2p_pb2_grpc
from flexinfer_transfer.directory import RemoteTensor, SourceManifest
from flexinfer_transfer.selector import SourceCandidate
from flexinfer_transfer.strategy import LoadContext

log = logging.getLogger(__name__)


class K8sServiceSettings(BaseSettings):
    """ModelExpress's environment variables for this backend (``MX_*``)."""

    model_config = SettingsConfigDict(env_prefix="MX_", extra="ignore")

    k8s_service_pattern: str = "mx-sources"
    """Service DNS; ``{rank}`` becomes the worker's rank, and ``:{worker_grpc_port + rank}``
    is appended when the result names no port (ModelExpress's default and rule)."""
    k8s_source_retries: int = Field(default=5, ge=0, le=100)
    """Retries on FAILED_PRECONDITION: a rolling update's old pods answer it until gone."""
    k8s_source_backoff_seconds: float = Field(default=0.5, ge=0, le=60)
    """Wait between retries, so a retry does not land on the same pod at once."""
    worker_grpc_port: int = Field(default=6555, ge=1, le=65535)
    """Base WorkerService port (MX_WORKER_GRPC_PORT)."""
    call_timeout_s: float = 30.0
    """Per GetTensorManifest (ModelExpress uses 30 s)."""


@dataclass
class K8sServiceDirectory:
    """A SourceDirectory over a Kubernetes Service's WorkerService."""

    identity: SourceIdentity
    settings: K8sServiceSettings

    def endpoint(self, rank: int) -> str:
        """The Service address for ``rank``."""
        resolved = self.settings.k8s_service_pattern.format(rank=rank)
        if ":" in resolved:
            return resolved
        return f"{resolved}:{self.settings.worker_grpc_port + rank}"

    def list_sources(self, ctx: LoadContext) -> list[SourceCandidate]:
        """One synthetic source, the rank's Service (kube-proxy picks the pod)."""
        return [SourceCandidate(self.identity.mx_source_id, "", ctx.worker_rank)]

    def manifest(self, candidate: SourceCandidate) -> SourceManifest:
        """GetTensorManifest on the Service, retried over fresh channels on mismatch."""
        endpoint = self.endpoint(candidate.worker_rank)
        attempts = self.settings.k8s_source_retries + 1
        last = ""
        for attempt in range(1, attempts + 1):
            try:
                reply = self._call(endpoint, candidate.mx_source_id)
                problem = _mismatch(reply, candidate)
                if problem is None:
                    return _manifest(reply)
                last = problem
            except grpc.RpcError as exc:
                if exc.code() != grpc.StatusCode.FAILED_PRECONDITION:
                    raise
                last = str(exc.details())
            if attempt < attempts:
                log.warning(
                    "%s answered for another source (%s), retrying on a fresh channel (%d/%d)",
                    endpoint,
                    last,
                    attempt,
                    attempts,
                    extra={"endpoint": endpoint, "reason": last},
                )
                time.sleep(self.settings.k8s_source_backoff_seconds)
        raise LookupError(
            f"{endpoint}: no pod served {candidate.mx_source_id} in {attempts} tries: {last}"
        )

    def _call(self, endpoint: str, mx_source_id: str) -> p2p_pb2.GetTensorManifestResponse:
        # A fresh channel per attempt: a live one sticks to the pod that just refused.
        with grpc.insecure_channel(endpoint) as channel:
            stub = p2p_pb2_grpc.WorkerServiceStub(channel)  # type: ignore[no-untyped-call]
            request = p2p_pb2.GetTensorManifestRequest(mx_source_id=mx_source_id)
            reply: p2p_pb2.GetTensorManifestResponse = stub.GetTensorManifest(
                request, timeout=self.settings.call_timeout_s, metadata=trace_metadata()
            )
            return reply


def _mismatch(reply: p2p_pb2.GetTensorManifestResponse, candidate: SourceCandidate) -> str | None:
    if reply.mx_source_id != candidate.mx_source_id:
        return f"mx_source_id {reply.mx_source_id!r}, not {candidate.mx_source_id!r}"
    if reply.worker_rank != candidate.worker_rank:
        return f"worker_rank {reply.worker_rank}, not {candidate.worker_rank}"
    return None


def _manifest(reply: p2p_pb2.GetTensorManifestResponse) -> SourceManifest:
    return SourceManifest(
        agent_name=reply.agent_name,
        agent_metadata=b"",
        tensors=[RemoteTensor(t.name, t.addr, t.size, t.device_id, t.dtype) for t in reply.tensors],
        accelerator=reply.accelerator,
        metadata_endpoint=reply.metadata_endpoint,
    )
