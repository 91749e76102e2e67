"""ArtifactSource: a worker's compile cache sealed, served and published ("target becomes
source" in ModelExpress's words).

``seal_directory`` copies the cache's files into a fresh bundle directory under
MX_ARTIFACT_BUNDLE_ROOT: the runtime keeps writing its cache (a later compile, a lock
taken), and the ArtifactServer refuses to serve a file changed since it was published, so
the bundle is what gets served, never the live cache. Lock files, temporaries and Python
bytecode are left out: they are per-process state, rebuilt by whoever loads the cache.
``ArtifactSource`` then serves the bundle through the WorkerService's artifact RPCs with its
own NIXL agent and publishes it to the registry under the artifact's SourceIdentity
(``mx_source_type`` says which cache), heartbeating until ``stop``.
"""

from __future__ import annotations

import fnmatch
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from flexinfer_common.mx_identity import SourceIdentity
from flexinfer_transfer._generated import p2p_pb2
from flexinfer_transfer.artifact_manifest import ArtifactManifest
from flexinfer_transfer.artifact_server import ArtifactServer
from flexinfer_transfer.artifact_settings import ArtifactSettings
from flexinfer_transfer.directory import SourceManifest
from flexinfer_transfer.nixl_manager import NixlSettings, NixlTransferManager
from flexinfer_transfer.publisher import Publisher, PublisherSettings
from flexinfer_transfer.worker_service import ServedWorker, serve_worker

log = logging.getLogger(__name__)

EXCLUDED = ("*.lock", "*.tmp", "*.tmp.*", "tmp*", ".*", "*.pyc", "__pycache__", "locks")
"""Names (files or directories, at any depth) a sealed bundle leaves out: inductor's
``locks/`` and FileLock files, half-written temporaries (``tmp…``, dot-files, which also
covers a fetcher's ``.partial-`` staging) and bytecode; none of them is cache content."""


def excluded(name: str) -> bool:
    """Whether a file or directory called ``name`` stays out of a sealed bundle."""
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in EXCLUDED)


def seal_directory(cache_dir: Path, bundle_root: Path) -> Path:
    """A new directory under ``bundle_root`` holding a copy of ``cache_dir``'s regular
    files, less the EXCLUDED ones (symlinks are not followed: a cache holds none)."""
    bundle_root.mkdir(parents=True, exist_ok=True)
    bundle = Path(tempfile.mkdtemp(prefix="bundle-", dir=bundle_root))
    try:
        for dirpath, dirnames, filenames in os.walk(cache_dir, followlinks=False):
            dirnames[:] = sorted(d for d in dirnames if not excluded(d))
            relative = Path(dirpath).relative_to(cache_dir)
            for name in sorted(filenames):
                source = Path(dirpath) / name
                if excluded(name) or source.is_symlink() or not source.is_file():
                    continue
                (bundle / relative).mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, bundle / relative / name)
    except BaseException:
        shutil.rmtree(bundle, ignore_errors=True)
        raise
    return bundle


def artifact_worker(
    manifest: ArtifactManifest, rank: int, accelerator: str, grpc_endpoint: str
) -> p2p_pb2.WorkerMetadata:
    """The WorkerMetadata an artifact source publishes: its accelerator (targets filter on
    it), its WorkerService and the artifact's counts (``artifact_source``)."""
    return p2p_pb2.WorkerMetadata(
        worker_rank=rank,
        accelerator=accelerator,
        status=p2p_pb2.SOURCE_STATUS_READY,
        worker_grpc_endpoint=grpc_endpoint,
        artifact_source=p2p_pb2.ArtifactSourceMetadata(
            artifact_id=manifest.artifact_id,
            total_size=manifest.total_size,
            file_count=len(manifest.files),
            chunk_count=len(manifest.chunks),
        ),
    )


@dataclass(frozen=True)
class ArtifactRole:
    """Who serves the artifact: its identity, this worker and where peers reach it."""

    identity: SourceIdentity
    worker_id: str
    accelerator: str
    advertise_host: str = "127.0.0.1"
    bind_host: str = "0.0.0.0"
    worker_rank: int = 0


class ArtifactSource:
    """One sealed bundle, served and (with a registry) published; ``stop`` withdraws it."""

    def __init__(
        self,
        bundle: Path,
        role: ArtifactRole,
        *,
        registry: str = "",
        token: str | None = None,
        settings: ArtifactSettings | None = None,
        heartbeat_s: float = 30.0,
    ) -> None:
        self.bundle = bundle
        self.role = role
        mx_source_id = role.identity.mx_source_id
        self.manager = NixlTransferManager(f"{role.worker_id}-artifacts", NixlSettings())
        try:
            self.server = ArtifactServer(self.manager, settings, worker_rank=role.worker_rank)
            self.manifest = self.server.publish(mx_source_id, bundle, role.identity.mx_source_type)
        except BaseException:
            self.manager.close()
            raise
        served = ServedWorker(
            mx_source_id,
            role.worker_id,
            role.worker_rank,
            SourceManifest(self.manager.name, b"", []),
        )
        self.grpc, port = serve_worker(served, role.bind_host, 0, artifacts=self.server)
        self.endpoint = f"{role.advertise_host}:{port}"
        self.publisher: Publisher | None = None
        if registry:
            worker = artifact_worker(
                self.manifest, role.worker_rank, role.accelerator, self.endpoint
            )
            self.publisher = Publisher(
                registry,
                role.identity,
                role.worker_id,
                worker,
                PublisherSettings(interval_s=heartbeat_s),
                token=token,
            )
            self.publisher.start()

    def stop(self) -> None:
        """STALE first (no new target picks it), then stop serving and drop the bundle."""
        if self.publisher is not None:
            self.publisher.stop()
        self.grpc.stop(None)
        self.server.close()
        self.manager.close()
        shutil.rmtree(self.bundle, ignore_errors=True)
