"""Building an engine's AdapterLoader: the engine-agnostic half of loading an engine.

Every engine (the reference engine, vLLM, SGLang) loads the same way: the configured
strategies with their metrics, a NIXL peer transport when a registry is configured and
nixl is installed, and a LoadContext naming who is loading. Only the EngineAdapter and the
identity differ, so engines describe themselves with a ``Loading`` and call
``build_adapter_loader``.
"""

from __future__ import annotations

import logging
import os
import socket
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import CollectorRegistry
from pydantic import AliasChoices, Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from flexinfer_common.auth import bearer_token
from flexinfer_common.mx_identity import SourceIdentity
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


class EngineLoadingSettings(BaseSettings):
    """Where an embedded loader finds its peers (env prefix ``FLEXINFER_TRANSFER_``, or
    ModelExpress's names for the same things)."""

    model_config = SettingsConfigDict(
        env_prefix="FLEXINFER_TRANSFER_", extra="ignore", populate_by_name=True
    )

    registry: str = Field(
        default="",
        validation_alias=AliasChoices("FLEXINFER_TRANSFER_REGISTRY", "MX_SERVER_ADDRESS"),
    )
    """The registry's gRPC address to list peer sources at. Empty (the default, unlike
    ModelExpress's localhost:8001): no peer reads, so an engine without a registry starts
    from files at once instead of timing out on a registry that is not there."""
    revision: str = Field(
        default="",
        validation_alias=AliasChoices("FLEXINFER_TRANSFER_REVISION", "MX_MODEL_REVISION"),
    )
    """SourceIdentity.revision override; empty: the engine's own (its configured revision)."""
    model_name: str = ""
    """SourceIdentity.model_name override; empty: the engine's (vLLM's served model name,
    SGLang's model path). Replicas find each other only when their names agree."""
    worker_id: str = ""
    """This worker's id; empty: ``<hostname>-<pid>``, unique per process on a host."""
    serve_peers: bool = False
    """Serve the loaded weights to peers (PeerSourceSettings says where and whether to
    publish). Off: serving registers the model's memory with NIXL and opens ports, which an
    engine must opt into."""
    registry_token: SecretStr | None = None
    """The registry's P2P token (its ``FLEXINFER_REGISTRY_P2P_TOKEN``), sent as
    ``authorization: Bearer`` when listing sources and, serving peers, publishing; needed
    when the registry was started with tokens. Unset: calls carry no token."""
    registry_token_file: Path | None = None
    """A file holding that token (a mounted Secret; its first token); the setting wins."""

    def registry_bearer(self) -> str | None:
        """The registry P2P token to send; None: none."""
        return bearer_token(self.registry_token, self.registry_token_file, kind="registry P2P")


@dataclass(frozen=True)
class Loading:
    """Who is loading: the identity fields a LoadContext needs."""

    identity: SourceIdentity
    worker_id: str
    device: str
    """Where file strategies put tensors (``cpu`` stages them for the engine's own copy)."""
    accelerator: str
    """The runtime accelerator family of the skeleton a peer READs into."""
    worker_rank: int = 0


def default_worker_id(worker_id: str = "") -> str:
    """``worker_id``, or ``<hostname>-<pid>`` (unique per process on a host, per pod)."""
    return worker_id or f"{socket.gethostname()}-{os.getpid()}"


def build_adapter_loader(
    model_dir: Path,
    loading: Loading,
    transfer: TransferSettings,
    registry: str,
    metrics_registry: CollectorRegistry,
    progress: Progress | None = None,
    *,
    registry_token: str | None = None,
) -> AdapterLoader:
    """An AdapterLoader: the configured strategies, a NIXL peer transport when ``registry``
    is set and nixl is installed (``progress`` is told of each READ batch;
    ``registry_token``, the registry's P2P token, goes with each registry call)."""
    metrics = TransferMetrics(metrics_registry)
    target = AdapterTarget()
    directory = RegistryDirectory(registry, token=registry_token) if registry else None
    transport = _transport(directory, loading, transfer, target, metrics, progress)
    parts = StrategyParts(
        metrics=metrics,
        selector=create_selector(transfer.selector),
        reader=transfer.reader(),
        transport=transport,
    )
    chain = create_strategy_chain(transfer.strategies, parts)
    context = LoadContext(
        model_dir=model_dir,
        device=loading.device,
        accelerator=loading.accelerator,
        worker_rank=loading.worker_rank,
        worker_id=loading.worker_id,
        model_name=loading.identity.model_name,
        source_id=loading.identity.mx_source_id,
        quantization=loading.identity.quantization,
        dtype=loading.identity.dtype,
    )
    return AdapterLoader(chain, target, context)


def _transport(
    directory: RegistryDirectory | None,
    loading: Loading,
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
    # Ranks sharing a worker id (one set for a whole tensor-parallel group) need distinct
    # agent names at their sources; rank 0 keeps the plain ``<id>-target``.
    rank = f"-rank{loading.worker_rank}" if loading.worker_rank else ""
    return NixlTransport(
        NixlTransferManager(f"{loading.worker_id}{rank}-target"),
        directory,
        target,
        batch_bytes=transfer.peer_batch_mib << 20,
        progress=progress,
        metrics=metrics,
    )
