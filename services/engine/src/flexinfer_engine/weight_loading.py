"""How the engine gets its weights: libs/transfer's LoadStrategyChain, a live peer first.

With a registry configured (``FLEXINFER_ENGINE_REGISTRY``) and the nixl extra installed,
the chain's ``rdma`` strategy lists the READY sources of this replica's SourceIdentity in
the registry and READs every tensor from one of them over NIXL; without them (or when every
source fails, a donor killed mid-transfer included) the file strategies load the model
directory. Everything here is built once per engine by ``build_engine``.
"""

from __future__ import annotations

import logging
import os
import socket
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import CollectorRegistry

from flexinfer_common.mx_identity import SourceIdentity
from flexinfer_engine.core.config import ModelConfig
from flexinfer_transfer.adapter_loader import AdapterLoader, AdapterTarget
from flexinfer_transfer.metrics import TransferMetrics
from flexinfer_transfer.nixl_manager import NixlTransferManager, nixl_missing
from flexinfer_transfer.nixl_transport import NixlTransport, Progress
from flexinfer_transfer.peer import PeerTransport
from flexinfer_transfer.registry_directory import RegistryDirectory
from flexinfer_transfer.selector_registry import create_selector
from flexinfer_transfer.settings import TransferSettings
from flexinfer_transfer.strategy import LoadContext
from flexinfer_transfer.strategy_registry import StrategyParts, create_strategy_chain

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Replica:
    """Who this engine is among the replicas of its model."""

    model_name: str
    revision: str
    """Stands in for a revision: the fingerprint of config.json (replicas serve
    interchangeable bytes only when their configs agree)."""
    worker_id: str
    device: str

    def identity(self, config: ModelConfig) -> SourceIdentity:
        """The SourceIdentity this replica loads as and publishes as."""
        return SourceIdentity(
            model_name=self.model_name,
            dtype=str(config.dtype).removeprefix("torch."),
            tensor_parallel_size=1,
            revision=self.revision,
        )


def default_worker_id(worker_id: str) -> str:
    """``worker_id``, or ``<hostname>-<pid>`` (unique per process on a host, per pod)."""
    return worker_id or f"{socket.gethostname()}-{os.getpid()}"


def build_loader(
    model_dir: Path,
    config: ModelConfig,
    replica: Replica,
    transfer: TransferSettings,
    registry: str,
    metrics_registry: CollectorRegistry,
    progress: Progress | None = None,
    *,
    registry_token: str | None = None,
) -> AdapterLoader:
    """The engine's AdapterLoader: the configured strategies, a NIXL peer transport when a
    registry is configured (``progress`` is told of each READ batch; ``registry_token``,
    the registry's P2P token, goes with each registry call)."""
    metrics = TransferMetrics(metrics_registry)
    target = AdapterTarget()
    directory = RegistryDirectory(registry, token=registry_token) if registry else None
    transport = _transport(directory, replica, transfer, target, metrics, progress)
    parts = StrategyParts(
        metrics=metrics,
        selector=create_selector(transfer.selector),
        reader=transfer.reader(),
        transport=transport,
    )
    chain = create_strategy_chain(transfer.strategies, parts)
    context = LoadContext(
        model_dir=model_dir,
        device=replica.device,
        accelerator=replica.device.split(":")[0],
        worker_id=replica.worker_id,
        model_name=replica.model_name,
        source_id=replica.identity(config).mx_source_id,
        dtype=str(config.dtype).removeprefix("torch."),
    )
    return AdapterLoader(chain, target, context)


def _transport(
    directory: RegistryDirectory | None,
    replica: Replica,
    transfer: TransferSettings,
    target: AdapterTarget,
    metrics: TransferMetrics,
    progress: Progress | None,
) -> PeerTransport | None:
    if directory is None:
        return None
    missing = nixl_missing()
    if missing is not None:
        log.warning("a registry is configured but peers cannot be read from: %s", missing)
        return None
    return NixlTransport(
        NixlTransferManager(f"{replica.worker_id}-target"),
        directory,
        target,
        batch_bytes=transfer.peer_batch_mib << 20,
        progress=progress,
        metrics=metrics,
    )
