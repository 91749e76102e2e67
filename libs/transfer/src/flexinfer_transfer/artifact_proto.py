"""Artifact manifests to and from p2p.proto's messages."""

from __future__ import annotations

from collections.abc import Sequence

from flexinfer_transfer._generated import p2p_pb2
from flexinfer_transfer.artifact_manifest import (
    ArtifactChunk,
    ArtifactFile,
    ArtifactManifest,
    UnsafeManifestError,
)


def files_pb(manifest: ArtifactManifest) -> list[p2p_pb2.ArtifactManifestFile]:
    """The file table as ArtifactManifestFile messages."""
    return [
        p2p_pb2.ArtifactManifestFile(file_index=i, path=f.path, size=f.size, checksum=f.checksum)
        for i, f in enumerate(manifest.files)
    ]


def chunk_pb(chunk: ArtifactChunk) -> p2p_pb2.ArtifactManifestChunk:
    """One chunk as an ArtifactManifestChunk message."""
    return p2p_pb2.ArtifactManifestChunk(
        chunk_index=chunk.index,
        file_index=chunk.file_index,
        file_offset=chunk.offset,
        length=chunk.length,
        checksum=chunk.checksum,
    )


def chunk_from_pb(message: p2p_pb2.ArtifactManifestChunk) -> ArtifactChunk:
    """An ArtifactManifestChunk message as an ArtifactChunk."""
    return ArtifactChunk(
        message.chunk_index,
        message.file_index,
        message.file_offset,
        message.length,
        message.checksum,
    )


def manifest_from_pb(
    header: p2p_pb2.GetArtifactManifestHeaderResponse,
    chunks: Sequence[p2p_pb2.ArtifactManifestChunk],
) -> ArtifactManifest:
    """The manifest a header and its chunk pages describe, checked against the header's
    counts, sizes and artifact id (the SHA-256 of the manifest itself)."""
    files = []
    for position, message in enumerate(header.files):
        if message.file_index != position:
            raise UnsafeManifestError(f"file {message.file_index} listed at position {position}")
        files.append(ArtifactFile(message.path, message.size, message.checksum))
    manifest = ArtifactManifest(
        header.mx_source_type,
        header.chunk_size,
        tuple(files),
        tuple(chunk_from_pb(c) for c in chunks),
        header.manifest_version,
    )
    counts = (len(manifest.files), len(manifest.chunks), manifest.total_size)
    if counts != (header.file_count, header.chunk_count, header.total_size):
        raise UnsafeManifestError(
            f"the header announces {header.file_count} files, {header.chunk_count} chunks, "
            f"{header.total_size} bytes; its tables hold {counts[0]}, {counts[1]}, {counts[2]}"
        )
    if manifest.artifact_id != header.artifact_id:
        raise UnsafeManifestError(
            f"the manifest hashes to {manifest.artifact_id}, not {header.artifact_id[:64]}"
        )
    return manifest


def source_metadata_pb(
    manifest: ArtifactManifest, node_rank: int = 0
) -> p2p_pb2.ArtifactSourceMetadata:
    """What a publisher puts in WorkerMetadata.artifact_source so targets can discover the
    artifact through the registry (ListSources with the artifact's identity)."""
    return p2p_pb2.ArtifactSourceMetadata(
        artifact_id=manifest.artifact_id,
        total_size=manifest.total_size,
        file_count=len(manifest.files),
        chunk_count=len(manifest.chunks),
        node_rank=node_rank,
    )
