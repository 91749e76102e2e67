"""ArtifactFetcher: the target side of p2p.proto's artifact RPCs.

It reads a source's manifest (header, then chunk pages), checks it (artifact id = the
manifest's SHA-256, safe relative paths, sizes within limits, chunks tiling each file),
then pulls one chunk at a time: PrepareArtifactChunk, a NIXL READ into a registered
buffer, a CRC32C check, ReleaseArtifactChunk. A corrupt chunk is prepared and read again
up to ``chunk_attempts`` times. Everything lands in a temporary directory beside the
destination, which is renamed into place only after every chunk and every file checksum
verified: a corrupt or partial artifact is never installed. Any failure raises
ArtifactTransferError (a SourceTransferError), which the caller handles by trying another
source or building the cache itself.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import google_crc32c
import grpc
import torch

from flexinfer_transfer._generated import p2p_pb2, p2p_pb2_grpc
from flexinfer_transfer.artifact_manifest import (
    ArtifactChunk,
    ArtifactManifest,
    UnsafeManifestError,
    check_counts,
    crc32c_hex,
    validate_manifest,
)
from flexinfer_transfer.artifact_proto import chunk_from_pb, manifest_from_pb
from flexinfer_transfer.artifact_settings import ArtifactSettings
from flexinfer_transfer.errors import SourceTransferError
from flexinfer_transfer.metrics import TransferMetrics
from flexinfer_transfer.nixl_manager import NixlError, NixlTransferManager
from flexinfer_transfer.pools import Region, tensor_region

log = logging.getLogger(__name__)


class ArtifactTransferError(SourceTransferError):
    """Fetching an artifact failed and nothing was installed; ``reason`` names why."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class FetchedArtifact:
    """An installed artifact."""

    artifact_id: str
    path: Path
    size: int
    chunks_retried: int
    seconds: float


def artifact_kind(mx_source_type: int) -> str:
    """``torch_compile_cache`` for MX_SOURCE_TYPE_TORCH_COMPILE_CACHE (a metric label)."""
    try:
        name = str(p2p_pb2.MxSourceType.Name(mx_source_type))
    except ValueError:
        return "unknown"
    return name.removeprefix("MX_SOURCE_TYPE_").lower()


@dataclass
class _Pull:
    """One fetch's connection: the stub, the ids, the receive buffer, the peer agent."""

    stub: Any
    mx_source_id: str
    artifact_id: str
    buffer: torch.Tensor = field(default_factory=lambda: torch.empty(0, dtype=torch.uint8))
    agent: str = ""


class ArtifactFetcher:
    """Pulls artifacts from source workers through a NIXL agent."""

    def __init__(
        self,
        manager: NixlTransferManager,
        metrics: TransferMetrics,
        settings: ArtifactSettings | None = None,
    ) -> None:
        self.manager = manager
        self.metrics = metrics
        self.settings = settings or ArtifactSettings()

    def fetch(
        self, endpoint: str, mx_source_id: str, artifact_id: str, dest: Path
    ) -> FetchedArtifact:
        """Install the artifact served at ``endpoint`` as the directory ``dest``."""
        started = time.perf_counter()
        kind = "unknown"
        try:
            _check_destination(dest)
            with grpc.insecure_channel(endpoint) as channel:
                stub = p2p_pb2_grpc.WorkerServiceStub(channel)  # type: ignore[no-untyped-call]
                manifest = self._manifest(stub, mx_source_id, artifact_id)
                kind = artifact_kind(manifest.mx_source_type)
                retried = self._install(
                    _Pull(stub, mx_source_id, manifest.artifact_id), manifest, dest
                )
        except Exception as exc:
            error = _as_transfer_error(exc)
            self.metrics.artifact_failures.labels(kind, error.reason).inc()
            log.warning(
                "artifact fetch from %s failed, nothing installed: %s",
                endpoint,
                error,
                extra={"source": endpoint, "reason": error.reason, "artifact_id": artifact_id},
            )
            raise error from exc
        self.metrics.artifact_bytes.labels(kind).inc(manifest.total_size)
        seconds = time.perf_counter() - started
        return FetchedArtifact(manifest.artifact_id, dest, manifest.total_size, retried, seconds)

    def _manifest(self, stub: Any, mx_source_id: str, artifact_id: str) -> ArtifactManifest:
        timeout = self.settings.transfer_timeout_s
        header = stub.GetArtifactManifestHeader(
            p2p_pb2.GetArtifactManifestHeaderRequest(
                mx_source_id=mx_source_id, artifact_id=artifact_id
            ),
            timeout=timeout,
        )
        if artifact_id and header.artifact_id != artifact_id:
            raise UnsafeManifestError(f"asked for artifact {artifact_id}, got {header.artifact_id}")
        check_counts(
            header.file_count,
            header.chunk_count,
            header.total_size,
            header.chunk_size,
            self.settings.limits(),
        )
        chunks: list[p2p_pb2.ArtifactManifestChunk] = []
        start = 0
        while start < header.chunk_count:
            page = stub.GetArtifactManifestChunks(
                p2p_pb2.GetArtifactManifestChunksRequest(
                    mx_source_id=mx_source_id,
                    artifact_id=header.artifact_id,
                    start_chunk_index=start,
                ),
                timeout=timeout,
            )
            chunks.extend(page.chunks)
            following = int(page.next_page_token) if page.next_page_token.isdigit() else None
            if len(chunks) > header.chunk_count or (following is not None and following <= start):
                raise UnsafeManifestError("chunk pages overrun chunk_count or do not advance")
            if following is None:
                break
            start = following
        manifest = manifest_from_pb(header, chunks)
        validate_manifest(manifest, self.settings.limits())
        return manifest

    def _install(self, pull: _Pull, manifest: ArtifactManifest, dest: Path) -> int:
        """Pull every chunk into a staging directory, verify, rename to ``dest``."""
        dest.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}.partial-", dir=dest.parent))
        registration = None
        try:
            for file in manifest.files:
                target = staging / file.path
                target.parent.mkdir(parents=True, exist_ok=True)
                os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW))
            largest = max((c.length for c in manifest.chunks), default=0)
            pull.buffer = torch.empty(largest, dtype=torch.uint8)
            if largest:
                registration = self.manager.register([tensor_region(pull.buffer)], "DRAM")
            retried = self._pull_all(pull, manifest, staging)
            os.rename(staging, dest)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        finally:
            if registration is not None:
                self.manager.release(registration)
            if pull.agent:
                self.manager.disconnect(pull.agent)
        return retried

    def _pull_all(self, pull: _Pull, manifest: ArtifactManifest, staging: Path) -> int:
        crcs = [0] * len(manifest.files)
        retried = 0
        for chunk in manifest.chunks:
            data, retries = self._verified_chunk(pull, chunk, manifest.mx_source_type)
            retried += retries
            file = manifest.files[chunk.file_index]
            _write(staging / file.path, chunk.offset, data)
            crcs[chunk.file_index] = google_crc32c.extend(crcs[chunk.file_index], data)
        for file, crc in zip(manifest.files, crcs, strict=True):
            if f"{crc:08x}" != file.checksum:
                raise ArtifactTransferError("checksum", f"{file.path} failed its file CRC32C")
        return retried

    def _verified_chunk(
        self, pull: _Pull, chunk: ArtifactChunk, mx_source_type: int
    ) -> tuple[bytes, int]:
        """The chunk's bytes once their CRC32C matches, and how many reads were retried."""
        attempts = self.settings.chunk_attempts
        for attempt in range(1, attempts + 1):
            data = bytes(self._pull_chunk(pull, chunk))  # one copy: google_crc32c needs bytes
            if crc32c_hex(data) == chunk.checksum:
                return data, attempt - 1
            log.warning("artifact chunk %d failed CRC32C (attempt %d)", chunk.index, attempt)
            if attempt < attempts:
                self.metrics.artifact_chunk_retries.labels(artifact_kind(mx_source_type)).inc()
        raise ArtifactTransferError(
            "checksum", f"artifact chunk {chunk.index} failed CRC32C on all {attempts} attempts"
        )

    def _pull_chunk(self, pull: _Pull, chunk: ArtifactChunk) -> memoryview:
        """Prepare, READ and release one chunk; its bytes in the receive buffer."""
        timeout = self.settings.transfer_timeout_s
        ids = {"mx_source_id": pull.mx_source_id, "artifact_id": pull.artifact_id}
        prepared = stub_call(
            pull.stub.PrepareArtifactChunk,
            p2p_pb2.PrepareArtifactChunkRequest(**ids, chunk_index=chunk.index),
            timeout,
        )
        try:
            if chunk_from_pb(prepared.chunk) != chunk or prepared.source.length != chunk.length:
                raise ArtifactTransferError(
                    "manifest", f"the source prepared another chunk {chunk.index}"
                )
            if not pull.agent:
                pull.agent = self.manager.connect(prepared.source_metadata)
            local = tensor_region(pull.buffer)
            remote = Region(prepared.source.addr, chunk.length, prepared.source.device_id)
            self.manager.read(pull.agent, [Region(local.addr, chunk.length)], [remote], "DRAM")
        finally:
            with contextlib.suppress(grpc.RpcError):  # the lease expires on its own
                pull.stub.ReleaseArtifactChunk(
                    p2p_pb2.ReleaseArtifactChunkRequest(**ids, lease_id=prepared.lease_id),
                    timeout=timeout,
                )
        return pull.buffer.numpy().data[: chunk.length]


BUSY_ATTEMPTS = 5
BUSY_BACKOFF_S = 0.05
"""A source with every slot lent answers RESOURCE_EXHAUSTED; a few short backoffs
(0.05 s doubling) wait for a slot without holding the fallback for long."""


def stub_call(method: Any, request: Any, timeout: float) -> Any:
    """``method(request)``, waiting out RESOURCE_EXHAUSTED a few times."""
    for attempt in range(BUSY_ATTEMPTS):
        try:
            return method(request, timeout=timeout)
        except grpc.RpcError as exc:
            busy = exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            if not busy or attempt == BUSY_ATTEMPTS - 1:
                raise
            time.sleep(BUSY_BACKOFF_S * 2**attempt)
    raise AssertionError("unreachable")


def _check_destination(dest: Path) -> None:
    if dest.is_symlink() or (dest.exists() and (not dest.is_dir() or any(dest.iterdir()))):
        raise ArtifactTransferError("exists", f"{dest} exists and is not an empty directory")


def _write(path: Path, offset: int, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    view = memoryview(data)  # slices without copying on a short write
    try:
        done = 0
        while done < len(view):
            done += os.pwrite(fd, view[done:], offset + done)
    finally:
        os.close(fd)


def _as_transfer_error(exc: Exception) -> ArtifactTransferError:
    if isinstance(exc, ArtifactTransferError):
        return exc
    if isinstance(exc, UnsafeManifestError):
        return ArtifactTransferError("unsafe_manifest", f"refused the source's manifest: {exc}")
    if isinstance(exc, grpc.RpcError):
        code = exc.code().name.lower()
        return ArtifactTransferError(code, f"the source answered {code}: {exc.details()}")
    if isinstance(exc, NixlError):
        return ArtifactTransferError("transfer", f"NIXL READ failed: {exc}")
    return ArtifactTransferError("install", f"{type(exc).__name__}: {exc}")
