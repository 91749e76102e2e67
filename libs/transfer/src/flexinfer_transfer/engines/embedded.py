"""What vLLM's and SGLang's loaders share: loading one model through the chain with a
LoadWeightsAdapter, and serving it to peers afterwards when asked to."""

from __future__ import annotations

import atexit
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import CollectorRegistry
from pydantic import SecretStr
from torch import nn

from flexinfer_transfer.engine_loading import (
    EngineLoadingSettings,
    Loading,
    build_adapter_loader,
)
from flexinfer_transfer.engines.module_adapter import LoadWeightsAdapter
from flexinfer_transfer.nixl_manager import nixl_missing
from flexinfer_transfer.peer_source import PeerSource, PeerSourceSettings, SourceRole
from flexinfer_transfer.settings import TransferSettings
from flexinfer_transfer.strategy_chain import LoadReport

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EmbeddedLoad:
    """One finished load inside an engine."""

    model: nn.Module
    report: LoadReport
    source: PeerSource | None
    """This worker as a source for its peers, when asked to serve them."""


WEIGHT_PATTERNS = ["*.safetensors", "*.json"]
"""What an engine's downloader fetches for the chain: the checkpoint and its configs."""


def model_directory(model: str, download: Callable[[str], str]) -> Path:
    """``model`` itself when it is a local directory, else where the engine's own
    downloader (given the name) put it: the hub is the engine's business, not the chain's."""
    local = Path(model)
    return local if local.is_dir() else Path(download(model))


def load_through_chain(
    model_dir: Path,
    loading: Loading,
    build: Callable[[], nn.Module],
    post_process: Callable[[nn.Module], None],
    settings: EngineLoadingSettings,
    skeleton_post_process: Callable[[nn.Module], None] | None = None,
) -> EmbeddedLoad:
    """The model, its weights from the fastest live source (a peer, then files)."""
    token = settings.registry_bearer()
    loader = build_adapter_loader(
        model_dir,
        loading,
        TransferSettings(),
        settings.registry,
        CollectorRegistry(),
        registry_token=token,
    )
    adapter = LoadWeightsAdapter(build, post_process, skeleton_post_process)
    report = loader.load(adapter)
    log.info(
        "flexinfer loaded %s (rank %d) by %s from %s in %.2fs; skipped: %s",
        loading.identity.model_name,
        loading.worker_rank,
        report.strategy,
        report.source or "?",
        report.seconds,
        report.skipped,
    )
    if adapter.model is None:
        raise RuntimeError("the strategy chain finished without a model")
    source = serve_peers(adapter.model, loading, token) if settings.serve_peers else None
    return EmbeddedLoad(adapter.model, report, source)


def serve_peers(
    model: nn.Module, loading: Loading, registry_token: str | None = None
) -> PeerSource | None:
    """Make this worker a source of its weights until the process exits (None: nixl is
    missing, logged); it publishes with ``registry_token`` unless
    ``FLEXINFER_TRANSFER_SOURCE_REGISTRY_TOKEN`` names another."""
    missing = nixl_missing()
    if missing is not None:
        log.warning("serving peers was asked for but is not possible: %s", missing)
        return None
    role = SourceRole(loading.identity, loading.worker_id, loading.worker_rank, loading.accelerator)
    settings = PeerSourceSettings()
    if settings.registry_token is None and registry_token is not None:
        settings = settings.model_copy(update={"registry_token": SecretStr(registry_token)})
    source = PeerSource(model, role, settings)
    # The engine owns the process and offers no shutdown hook to a loader: withdraw (STALE,
    # drain readers) when the interpreter exits.
    atexit.register(source.stop)
    return source
