"""PeerSource: everything that makes a loaded worker a source for its peers, in one object.

``start()`` after the weights are loaded: a NIXL agent with its metadata listener, the
model's memory registered (pooled), the WorkerService (manifests and read leases) and, when
a registry is configured, the publisher with its heartbeat. ``stop()`` before the memory is
freed (sleep, unload, exit), in the order that keeps every target safe: STALE first so no
new target picks this worker, then the read leases drained so no READ is in flight, then
the WorkerService and the registration go.
"""

from __future__ import annotations

import logging
import socket
from dataclasses import dataclass
from typing import Any

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict
from torch import nn

from flexinfer_common.mx_identity import SourceIdentity
from flexinfer_transfer.nixl_manager import NixlSettings, NixlTransferManager
from flexinfer_transfer.nixl_source import NixlSource
from flexinfer_transfer.publisher import Publisher, PublisherSettings, worker_metadata
from flexinfer_transfer.read_leases import ReadLeases
from flexinfer_transfer.worker_service import ServedWorker, serve_worker

log = logging.getLogger(__name__)


class PeerSourceSettings(BaseSettings):
    """How a worker serves its weights to peers (env prefix ``FLEXINFER_TRANSFER_SOURCE_``)."""

    model_config = SettingsConfigDict(env_prefix="FLEXINFER_TRANSFER_SOURCE_", extra="ignore")

    registry: str = ""
    """The registry's gRPC address to publish to; empty: no publication (the k8s-service
    backend finds workers through their Service instead)."""
    registry_token: SecretStr | None = None
    """The registry's P2P token, sent with each publication and heartbeat (the engine
    passes its ``FLEXINFER_ENGINE_REGISTRY_TOKEN``); None: a registry without auth."""
    advertise_host: str = "127.0.0.1"
    """The address peers reach this worker at (the pod IP in a cluster)."""
    bind_host: str = "0.0.0.0"
    """Where the WorkerService listens."""
    worker_grpc_port: int = Field(default=0, ge=0, le=65535)
    """WorkerService port (ModelExpress: MX_WORKER_GRPC_PORT + rank); 0 picks a free one."""
    metadata_port: int = Field(default=0, ge=0, le=65535)
    """NIXL metadata listener port (ModelExpress: MX_METADATA_PORT 5555 + device id); 0
    picks a free one."""
    heartbeat_interval_s: float = Field(default=30.0, gt=0)
    """MX_HEARTBEAT_INTERVAL_SECS (see PublisherSettings)."""
    drain_timeout_s: float = Field(default=60.0, ge=0)
    """Longest ``stop`` waits for targets still reading; after it the memory goes anyway
    and their READs fail over to their next source."""


@dataclass(frozen=True)
class SourceRole:
    """Who this worker is, as a source."""

    identity: SourceIdentity
    worker_id: str
    worker_rank: int = 0
    accelerator: str = ""


class PeerSource:
    """A started peer source (see the module docstring)."""

    def __init__(self, module: nn.Module, role: SourceRole, settings: PeerSourceSettings) -> None:
        self.role = role
        self.settings = settings
        self.leases = ReadLeases()
        metadata_port = settings.metadata_port or _free_port()
        self.manager = NixlTransferManager(
            f"{role.worker_id}-rank{role.worker_rank}", NixlSettings(listen_port=metadata_port)
        )
        self.source = NixlSource(self.manager, module, accelerator=role.accelerator)
        manifest = self.source.manifest()
        metadata_endpoint = f"{settings.advertise_host}:{metadata_port}"
        served = ServedWorker(
            role.identity.mx_source_id,
            role.worker_id,
            role.worker_rank,
            manifest,
            metadata_endpoint=metadata_endpoint,
        )
        self.server, self.grpc_port = serve_worker(
            served, settings.bind_host, settings.worker_grpc_port, self.leases
        )
        self.publisher: Publisher | None = None
        if settings.registry:
            worker = worker_metadata(manifest, role.worker_rank)
            worker.metadata_endpoint = metadata_endpoint
            worker.worker_grpc_endpoint = f"{settings.advertise_host}:{self.grpc_port}"
            self.publisher = Publisher(
                settings.registry,
                role.identity,
                role.worker_id,
                worker,
                PublisherSettings(interval_s=settings.heartbeat_interval_s),
                load=lambda: float(self.leases.in_flight()),
                token=_secret(settings.registry_token),
            )
            self.publisher.start()

    def stop(self) -> bool:
        """Withdraw: STALE, drain readers, stop serving, deregister. False when readers
        were still out at the drain timeout."""
        if self.publisher is not None:
            self.publisher.stop()
        drained = self.leases.drain(self.settings.drain_timeout_s)
        if not drained:
            log.warning(
                "%d peers still reading after %.0fs; withdrawing anyway",
                self.leases.in_flight(),
                self.settings.drain_timeout_s,
            )
        self.server.stop(None)
        self.source.close()
        return drained


def _secret(value: SecretStr | None) -> str | None:
    return value.get_secret_value() if value is not None else None


def _free_port() -> int:
    # NIXL cannot report the port its listener bound, so one is chosen here first.
    with socket.socket() as sock:
        sock.bind(("", 0))
        port: Any = sock.getsockname()[1]
        return int(port)
