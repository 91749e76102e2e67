"""Compile mode and its cache: the blocks' MLP through ``torch.compile``, the inductor cache
fetched from a peer before compiling and served to the next replicas once ready.

``CompileCache.prepare`` runs after the weights are loaded and before the engine reports
ready: with MX_ARTIFACT_TRANSFER it looks for a READY artifact source of this replica's
cache identity and installs its cache (staged, CRC32C-verified, renamed into place), then
compiles and warms up (prefill and decode, the two graphs), counting inductor's FX graph
cache hits. A fetch that fails for any reason (no source, a corrupt chunk, a donor gone)
is logged with its reason and counted, and the compile runs from scratch; a compile that
fails leaves the model eager. Neither is fatal. ``publish`` seals the cache and serves it
(libs/transfer's ArtifactSource) until ``stop``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from prometheus_client import CollectorRegistry, Counter

from flexinfer_common.mx_identity import SourceIdentity
from flexinfer_engine.core.engine import InferenceEngine
from flexinfer_engine.core.model import KVCache, mlp
from flexinfer_engine.settings import EngineSettings
from flexinfer_transfer._generated import p2p_pb2
from flexinfer_transfer.artifact_discovery import ArtifactNeed, PeerArtifact, fetch_from_peers
from flexinfer_transfer.artifact_fetch import ArtifactFetcher, ArtifactTransferError
from flexinfer_transfer.artifact_source import ArtifactRole, ArtifactSource, seal_directory
from flexinfer_transfer.metrics import TransferMetrics
from flexinfer_transfer.nixl_manager import NixlSettings, NixlTransferManager, nixl_missing
from flexinfer_transfer.peer_source import PeerSourceSettings
from flexinfer_transfer.registry_directory import RegistryDirectory

log = logging.getLogger(__name__)

TORCH_COMPILE_CACHE = p2p_pb2.MX_SOURCE_TYPE_TORCH_COMPILE_CACHE
COMPILE_RECIPE = "block-mlp;inductor;dynamic=True"
"""What compile mode compiles and how: part of the cache identity, so a replica compiling
something else never fetches a cache it cannot hit."""
WARMUP_PROMPT = 4
"""Prefill tokens of the warm-up: more than one, so the prefill graph is dynamic in rows."""


def default_cache_dir(worker_id: str) -> Path:
    """``<tmp>/flexinfer-engine/<worker_id>/torchinductor`` (EngineSettings says why)."""
    return Path(tempfile.gettempdir()) / "flexinfer-engine" / worker_id / "torchinductor"


def configure_cache_dir(cache_dir: Path) -> None:
    """Point inductor, and Triton under it, at ``cache_dir``: the one place the engine sets
    them. Inductor reads the variables at each compile, so this precedes the first one."""
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(cache_dir)
    os.environ["TRITON_CACHE_DIR"] = str(cache_dir / "triton")
    os.environ["TORCHINDUCTOR_FX_GRAPH_CACHE"] = "1"
    os.environ["TORCHINDUCTOR_AUTOGRAD_CACHE"] = "1"


def cache_identity(weights: SourceIdentity, device: torch.device) -> SourceIdentity:
    """The compile cache's identity: the weights' (model, revision, dtype...) with the
    cache type, torch's version, the device's architecture and the compile recipe."""
    recipe = f"{COMPILE_RECIPE};python={sys.version_info.major}.{sys.version_info.minor}"
    return dataclasses.replace(
        weights,
        mx_source_type=TORCH_COMPILE_CACHE,
        torch_version=torch.__version__,
        gpu_arch=device_arch(device),
        compile_config_digest=hashlib.sha256(recipe.encode()).hexdigest()[:16],
    )


def device_arch(device: torch.device) -> str:
    """``sm_90`` for a GPU, ``cpu-avx512`` for a CPU: generated kernels target it."""
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        return f"sm_{major}{minor}"
    return f"cpu-{torch.backends.cpu.get_cpu_capability().lower()}"


def is_empty(path: Path) -> bool:
    """True when ``path`` is missing or an empty directory (the only place a fetched
    cache may be installed: a fetch never merges into files a compile may be using)."""
    return not path.exists() or (path.is_dir() and not any(path.iterdir()))


@dataclass(frozen=True)
class CompileReport:
    """How the compile cache was obtained (``/healthz``'s ``compile_cache``)."""

    source: str
    """``peer`` (fetched), ``local`` (compiled here) or ``none`` (the model stayed eager)."""
    seconds: float
    """Compile and warm-up, after the fetch."""
    fetch_seconds: float = 0.0
    donor: str = ""
    fallback_reason: str = ""
    cache_hits: int = 0
    cache_misses: int = 0

    def as_dict(self) -> dict[str, Any]:
        """The JSON form."""
        return dataclasses.asdict(self)


def fxgraph_counts() -> tuple[int, int]:
    """Inductor's FX graph cache (hits, misses) so far in this process."""
    from torch._dynamo.utils import counters

    inductor = counters["inductor"]
    return int(inductor["fxgraph_cache_hit"]), int(inductor["fxgraph_cache_miss"])


def compile_and_warm_up(engine: InferenceEngine) -> tuple[int, int]:
    """Compile every block's MLP and run one prefill and one decode step so both graphs
    exist; the FX graph cache (hits, misses) this took."""
    engine.model.use_mlp(torch.compile(mlp, dynamic=True))
    hits, misses = fxgraph_counts()
    config = engine.config
    with torch.inference_mode():
        cache = KVCache(config, 1, engine.device, config.dtype)
        engine.model(torch.zeros(1, WARMUP_PROMPT, dtype=torch.long, device=engine.device), cache)
        engine.model(torch.zeros(1, 1, dtype=torch.long, device=engine.device), cache)
    after = fxgraph_counts()
    return after[0] - hits, after[1] - misses


class CompileCache:
    """Compile mode for one engine (see the module docstring)."""

    def __init__(
        self,
        settings: EngineSettings,
        weights: SourceIdentity,
        worker_id: str,
        metrics: TransferMetrics,
        registry: CollectorRegistry,
    ) -> None:
        self.settings = settings
        self.weights = weights
        self.worker_id = worker_id
        self.metrics = metrics
        self.cache_dir = settings.compile_cache_dir or default_cache_dir(worker_id)
        self.report: CompileReport | None = None
        self.source: ArtifactSource | None = None
        self._lock = threading.Lock()
        self._stopped = False
        self.fallbacks = Counter(
            "flexinfer_engine_compile_cache_fallbacks",
            "Compile caches built locally after a fetch from a peer failed, by reason",
            ["reason"],
            registry=registry,
        )
        configure_cache_dir(self.cache_dir)

    @property
    def sharing(self) -> bool:
        """Whether the cache travels between replicas (MX_ARTIFACT_TRANSFER and a registry)."""
        return self.settings.artifact_transfer and bool(self.settings.registry)

    def prepare(self, engine: InferenceEngine) -> CompileReport:
        """Fetch the cache when a peer has it, then compile and warm up (never raises)."""
        identity = cache_identity(self.weights, engine.device)
        fetched, fetch_seconds, reason = self.fetch(identity, engine.device.type)
        started = time.perf_counter()
        try:
            hits, misses = compile_and_warm_up(engine)
        except Exception as exc:
            engine.model.use_mlp(None)
            log.error("torch.compile failed, serving eager: %s", exc, extra={"reason": "compile"})
            self.report = CompileReport("none", 0.0, fallback_reason=f"compile failed: {exc}")
            return self.report
        seconds = time.perf_counter() - started
        self.report = CompileReport(
            "peer" if fetched else "local",
            seconds,
            fetch_seconds,
            fetched.source if fetched else "",
            reason,
            hits,
            misses,
        )
        log.info("compile cache: %s", self.report.as_dict(), extra=self.report.as_dict())
        return self.report

    def fetch(
        self, identity: SourceIdentity, accelerator: str
    ) -> tuple[PeerArtifact | None, float, str]:
        """Install the cache from a peer when sharing and the cache directory is empty:
        (what was fetched or None, seconds spent, why nothing was: a failure is counted)."""
        if not self.sharing:
            return None, 0.0, ""
        if not is_empty(self.cache_dir):
            return None, 0.0, "cache_present"  # this replica's own earlier compile
        started = time.perf_counter()
        try:
            fetched = self._fetch_from_peers(ArtifactNeed(identity, accelerator))
        except ArtifactTransferError as exc:
            seconds = time.perf_counter() - started
            self.fallbacks.labels(exc.reason).inc()
            log.warning(
                "no compile cache from a peer (%s), compiling locally: %s",
                exc.reason,
                exc,
                extra={"reason": exc.reason, "mx_source_id": identity.mx_source_id},
            )
            return None, seconds, exc.reason
        return fetched, time.perf_counter() - started, ""

    def _fetch_from_peers(self, need: ArtifactNeed) -> PeerArtifact:
        if (missing := nixl_missing()) is not None:
            raise ArtifactTransferError("nixl_missing", missing)
        manager = NixlTransferManager(f"{self.worker_id}-artifact-target", NixlSettings())
        try:
            directory = RegistryDirectory(
                self.settings.registry, token=self.settings.registry_bearer()
            )
            fetcher = ArtifactFetcher(manager, self.metrics)
            return fetch_from_peers(directory, fetcher, need, self.cache_dir)
        finally:
            manager.close()

    def publish(self, engine: InferenceEngine) -> None:
        """Seal the warmed-up cache and serve it to peers (when sharing; never raises)."""
        report = self.report
        if not self.sharing or report is None or report.source == "none":
            return
        role = ArtifactRole(
            cache_identity(self.weights, engine.device),
            self.worker_id,
            engine.device.type,
            advertise_host=PeerSourceSettings().advertise_host,
            bind_host=PeerSourceSettings().bind_host,
        )
        try:
            bundle = seal_directory(self.cache_dir, self.settings.bundle_root())
            with self._lock:
                if self._stopped:
                    return
                self.source = ArtifactSource(
                    bundle,
                    role,
                    registry=self.settings.registry,
                    token=self.settings.registry_bearer(),
                )
        except Exception as exc:
            log.warning("serving the compile cache to peers failed: %s", exc)
            return
        log.info(
            "serving compile cache %s (%d files, %d bytes) at %s",
            self.source.manifest.artifact_id,
            len(self.source.manifest.files),
            self.source.manifest.total_size,
            self.source.endpoint,
        )

    def stop(self) -> None:
        """Withdraw the served cache (STALE, stop serving, drop the bundle)."""
        with self._lock:
            self._stopped = True
            source, self.source = self.source, None
        if source is not None:
            source.stop()
        if self.settings.compile_cache_dir is None:
            # The default directory is named after this process: nobody will reuse it.
            shutil.rmtree(self.cache_dir.parent, ignore_errors=True)
