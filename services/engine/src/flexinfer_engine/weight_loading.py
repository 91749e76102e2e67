"""How the engine gets its weights: libs/transfer's LoadStrategyChain, a live peer first.

With a registry configured (``FLEXINFER_ENGINE_REGISTRY``) and the nixl extra installed,
the chain's ``rdma`` strategy lists the READY sources of this replica's SourceIdentity in
the registry and READs every tensor from one of them over NIXL; without them (or when every
source fails, a donor killed mid-transfer included) the file strategies load the model
directory. Everything here is built once per engine by ``build_engine``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from prometheus_client import CollectorRegistry

from flexinfer_common.mx_identity import SourceIdentity
from flexinfer_engine.core.config import ModelConfig
from flexinfer_transfer.adapter_loader import AdapterLoader
from flexinfer_transfer.engine_loading import Loading, build_adapter_loader
from flexinfer_transfer.nixl_transport import Progress
from flexinfer_transfer.settings import TransferSettings


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
    """The engine's AdapterLoader (libs/transfer's, for this replica's identity and device):
    the configured strategies, a NIXL peer transport when a registry is configured
    (``progress`` is told of each READ batch; ``registry_token``, the registry's P2P token,
    goes with each registry call)."""
    loading = Loading(
        identity=replica.identity(config),
        worker_id=replica.worker_id,
        device=replica.device,
        accelerator=replica.device.split(":")[0],
    )
    return build_adapter_loader(
        model_dir,
        loading,
        transfer,
        registry,
        metrics_registry,
        progress,
        registry_token=registry_token,
    )
