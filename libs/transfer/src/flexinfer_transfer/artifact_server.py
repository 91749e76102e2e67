"""ArtifactServer: the source side of p2p.proto's artifact RPCs.

A worker publishes a directory (a compile cache) under the artifact's ``mx_source_id``;
targets read its manifest (GetArtifactManifestHeader, GetArtifactManifestChunks), then,
one chunk at a time, ask for it to be read into a registered DRAM slot
(PrepareArtifactChunk returns the slot's NIXL descriptor and this agent's metadata), READ
it over NIXL and return the slot (ReleaseArtifactChunk). Deny by default: only files
found under the published root at publish time are served (build_manifest), by index,
never by a path a request names; a file changed since publish is refused, not served.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import grpc

from flexinfer_transfer._generated import p2p_pb2
from flexinfer_transfer.artifact_manifest import ARTIFACT_ID, ArtifactManifest, build_manifest
from flexinfer_transfer.artifact_proto import chunk_pb, files_pb
from flexinfer_transfer.artifact_settings import ArtifactSettings
from flexinfer_transfer.artifact_slots import ChunkSlots, SlotsBusyError
from flexinfer_transfer.nixl_manager import NixlTransferManager

log = logging.getLogger(__name__)

PAGE_CHUNKS = 1024
"""Most chunk entries per GetArtifactManifestChunks page (ModelExpress's page size)."""
PUMP_INTERVAL_S = 0.002
"""How often the idle agent is progressed so a new peer's connection completes (see
nixl_source.py: the UCX progress thread is off)."""

ChunkReader = Callable[[Path, int, memoryview], None]
"""Fills the view with the file's bytes from an offset (tests inject faults here)."""


class ArtifactRequestError(Exception):
    """A request the server refuses, with the gRPC status to answer."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def read_range(path: Path, offset: int, into: memoryview) -> None:
    """Read ``len(into)`` bytes of ``path`` from ``offset``, refusing a symlink swapped in."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        done = 0
        while done < len(into):
            count = os.preadv(fd, [into[done:]], offset + done)
            if count == 0:
                raise OSError(f"{path} ended at byte {offset + done}, inside a chunk")
            done += count
    finally:
        os.close(fd)


@dataclass(frozen=True)
class PublishedArtifact:
    """A sealed artifact: its manifest, the real path of each file and its (size,
    mtime_ns) at publish."""

    mx_source_id: str
    manifest: ArtifactManifest
    paths: tuple[Path, ...]
    stamps: tuple[tuple[int, int], ...]


class ArtifactServer:
    """Published artifacts, the chunk slots and the agent's pump."""

    def __init__(
        self,
        manager: NixlTransferManager,
        settings: ArtifactSettings | None = None,
        *,
        reader: ChunkReader = read_range,
        worker_rank: int = 0,
        metadata_endpoint: str = "",
    ) -> None:
        self.manager = manager
        self.settings = settings or ArtifactSettings()
        self.worker_rank = worker_rank
        self.metadata_endpoint = metadata_endpoint
        self._reader = reader
        self._artifacts: dict[tuple[str, str], PublishedArtifact] = {}
        self._lock = threading.Lock()
        s = self.settings
        self.slots = ChunkSlots(s.source_slots, s.chunk_bytes, s.lease_timeout_s)
        regions = [slot.region for slot in self.slots.slots]
        self._registration = manager.register(regions, "DRAM", pooled=False)
        self._metadata = manager.metadata()
        self._stop = threading.Event()
        self._pump = threading.Thread(target=self._run, name="artifact-pump", daemon=True)
        self._pump.start()

    def publish(self, mx_source_id: str, root: Path, mx_source_type: int) -> ArtifactManifest:
        """Seal the files under ``root`` and serve them under ``mx_source_id``."""
        manifest, paths = build_manifest(
            root, mx_source_type, self.settings.chunk_bytes, self.settings.limits()
        )
        stamps = tuple((st.st_size, st.st_mtime_ns) for st in (p.stat() for p in paths))
        published = PublishedArtifact(mx_source_id, manifest, tuple(paths), stamps)
        with self._lock:
            self._artifacts[(mx_source_id, manifest.artifact_id)] = published
        log.info(
            "serving artifact %s from %s: %d files, %d bytes",
            manifest.artifact_id,
            root,
            len(manifest.files),
            manifest.total_size,
            extra={"mx_source_id": mx_source_id, "artifact_id": manifest.artifact_id},
        )
        return manifest

    def unpublish(self, mx_source_id: str, artifact_id: str) -> None:
        """Stop serving an artifact (prepared chunks stay valid until released)."""
        with self._lock:
            self._artifacts.pop((mx_source_id, artifact_id), None)

    def header(
        self, request: p2p_pb2.GetArtifactManifestHeaderRequest
    ) -> p2p_pb2.GetArtifactManifestHeaderResponse:
        """GetArtifactManifestHeader: identity, counts and the file table."""
        art = self._find(request.mx_source_id, request.artifact_id)
        m = art.manifest
        return p2p_pb2.GetArtifactManifestHeaderResponse(
            mx_source_id=art.mx_source_id,
            artifact_id=m.artifact_id,
            manifest_version=m.manifest_version,
            mx_source_type=m.mx_source_type,  # type: ignore[arg-type]
            total_size=m.total_size,
            file_count=len(m.files),
            chunk_count=len(m.chunks),
            chunk_size=m.chunk_size,
            metadata_endpoint=self.metadata_endpoint,
            agent_name=self.manager.name,
            worker_rank=self.worker_rank,
            files=files_pb(m),
        )

    def chunk_page(
        self, request: p2p_pb2.GetArtifactManifestChunksRequest
    ) -> p2p_pb2.GetArtifactManifestChunksResponse:
        """GetArtifactManifestChunks: up to PAGE_CHUNKS chunk entries from an index."""
        art = self._find(request.mx_source_id, request.artifact_id)
        chunks = art.manifest.chunks
        start = request.start_chunk_index
        if start > len(chunks):
            raise ArtifactRequestError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"start_chunk_index {start} is past the artifact's {len(chunks)} chunks",
            )
        end = min(start + min(request.max_chunks or PAGE_CHUNKS, PAGE_CHUNKS), len(chunks))
        return p2p_pb2.GetArtifactManifestChunksResponse(
            mx_source_id=art.mx_source_id,
            artifact_id=art.manifest.artifact_id,
            start_chunk_index=start,
            chunks=[chunk_pb(c) for c in chunks[start:end]],
            next_page_token=str(end) if end < len(chunks) else "",
        )

    def prepare(
        self, request: p2p_pb2.PrepareArtifactChunkRequest
    ) -> p2p_pb2.PrepareArtifactChunkResponse:
        """PrepareArtifactChunk: read one chunk into a lent slot; its descriptor."""
        art = self._find(request.mx_source_id, request.artifact_id)
        chunks = art.manifest.chunks
        if request.chunk_index >= len(chunks):
            raise ArtifactRequestError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"chunk_index {request.chunk_index} out of range: the artifact has "
                f"{len(chunks)} chunks",
            )
        chunk = chunks[request.chunk_index]
        self._check_unchanged(art, chunk.file_index)
        try:
            lease, slot = self.slots.acquire()
        except SlotsBusyError as exc:
            raise ArtifactRequestError(grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc)) from exc
        try:
            self._reader(art.paths[chunk.file_index], chunk.offset, slot.view(chunk.length))
        except OSError as exc:
            self.slots.give_back(lease)
            raise ArtifactRequestError(
                grpc.StatusCode.FAILED_PRECONDITION, f"artifact file unreadable: {exc}"
            ) from exc
        self.slots.attach(lease, chunk)
        return p2p_pb2.PrepareArtifactChunkResponse(
            mx_source_id=art.mx_source_id,
            artifact_id=art.manifest.artifact_id,
            lease_id=lease,
            chunk=chunk_pb(chunk),
            source=p2p_pb2.ArtifactChunkTransferDescriptor(
                addr=slot.region.addr, length=chunk.length, device_id=slot.region.device_id
            ),
            source_metadata=self._metadata,
        )

    def release(
        self, request: p2p_pb2.ReleaseArtifactChunkRequest
    ) -> p2p_pb2.ReleaseArtifactChunkResponse:
        """ReleaseArtifactChunk: return a lent slot; NOT_FOUND when unknown or expired."""
        art = self._find(request.mx_source_id, request.artifact_id)
        try:
            chunk = self.slots.release(request.lease_id)
        except KeyError as exc:
            raise ArtifactRequestError(
                grpc.StatusCode.NOT_FOUND,
                f"artifact chunk lease not found or expired: {request.lease_id[:64]}",
            ) from exc
        return p2p_pb2.ReleaseArtifactChunkResponse(
            mx_source_id=art.mx_source_id,
            artifact_id=art.manifest.artifact_id,
            chunk=chunk_pb(chunk) if chunk is not None else None,  # type: ignore[arg-type]
        )

    def _find(self, mx_source_id: str, artifact_id: str) -> PublishedArtifact:
        if not mx_source_id:
            raise ArtifactRequestError(grpc.StatusCode.INVALID_ARGUMENT, "mx_source_id is required")
        with self._lock:
            if not artifact_id:  # ModelExpress targets may omit it when a source has one
                mine = [a for (s, _), a in self._artifacts.items() if s == mx_source_id]
                if len(mine) == 1:
                    return mine[0]
                if mine:
                    raise ArtifactRequestError(
                        grpc.StatusCode.INVALID_ARGUMENT,
                        f"artifact_id is required: {len(mine)} artifacts are published",
                    )
            elif not ARTIFACT_ID.fullmatch(artifact_id):
                raise ArtifactRequestError(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"artifact_id must be 64 lowercase hex digits, got {artifact_id[:80]!r}",
                )
            found = self._artifacts.get((mx_source_id, artifact_id))
        if found is None:
            raise ArtifactRequestError(
                grpc.StatusCode.NOT_FOUND,
                f"no artifact {artifact_id or '(any)'} is published for mx_source_id "
                f"{mx_source_id[:64]}",
            )
        return found

    def _check_unchanged(self, art: PublishedArtifact, file_index: int) -> None:
        path = art.paths[file_index]
        try:
            st = os.stat(path, follow_symlinks=False)
            stamp = (st.st_size, st.st_mtime_ns)
        except OSError:
            stamp = (-1, -1)
        if stamp != art.stamps[file_index]:
            raise ArtifactRequestError(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"artifact {art.manifest.artifact_id} changed since it was published "
                f"({art.manifest.files[file_index].path}); publish it again",
            )

    def _run(self) -> None:
        while not self._stop.wait(PUMP_INTERVAL_S):
            self.manager.notifications()

    def close(self) -> None:
        """Stop serving and deregister the slots."""
        self._stop.set()
        self._pump.join()
        self.manager.release(self._registration)
