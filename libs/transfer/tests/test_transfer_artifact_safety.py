"""Artifact transfer refuses what it must: bad requests get a gRPC status with details,
a manifest that would write outside its destination or is absurdly large is refused
before a byte moves, and escaping symlinks are never published."""

from __future__ import annotations

from collections.abc import Callable
from concurrent import futures
from dataclasses import replace
from pathlib import Path
from typing import Any

import grpc
import modelexpress.p2p_pb2 as mx_p2p
import modelexpress.p2p_pb2_grpc as mx_p2p_grpc
import pytest
from prometheus_client import CollectorRegistry

from flexinfer_testing.artifacts import (
    SETTINGS,
    SOURCE_ID,
    TORCH_COMPILE,
    Source,
    artifact_fixtures,
    make_cache,
    sample,
)
from flexinfer_transfer._generated import p2p_pb2, p2p_pb2_grpc
from flexinfer_transfer.artifact_fetch import ArtifactFetcher, ArtifactTransferError
from flexinfer_transfer.artifact_manifest import (
    ArtifactLimits,
    ArtifactManifest,
    UnsafeManifestError,
    build_manifest,
)
from flexinfer_transfer.artifact_proto import chunk_pb, files_pb, source_metadata_pb

serve, fetcher = artifact_fixtures()


@pytest.mark.parametrize(
    ("call", "fields", "code", "message"),
    [
        (
            "GetArtifactManifestHeader",
            {"artifact_id": "../../etc"},
            "INVALID_ARGUMENT",
            "64 lowercase hex",
        ),
        ("GetArtifactManifestHeader", {"artifact_id": "ab" * 32}, "NOT_FOUND", "no artifact"),
        (
            "GetArtifactManifestHeader",
            {"mx_source_id": ""},
            "INVALID_ARGUMENT",
            "mx_source_id is required",
        ),
        ("GetArtifactManifestHeader", {"mx_source_id": "0" * 16}, "NOT_FOUND", "no artifact"),
        (
            "GetArtifactManifestChunks",
            {"start_chunk_index": 99},
            "INVALID_ARGUMENT",
            "past the artifact",
        ),
        ("PrepareArtifactChunk", {"chunk_index": 99}, "INVALID_ARGUMENT", "out of range"),
        ("ReleaseArtifactChunk", {"lease_id": "nope"}, "NOT_FOUND", "lease not found"),
    ],
)
def test_bad_requests_get_a_status_with_details(
    serve: Callable[..., Source], call: str, fields: dict[str, Any], code: str, message: str
) -> None:
    source = serve()
    request_type = getattr(mx_p2p, call + "Request")
    ids = {"mx_source_id": SOURCE_ID, "artifact_id": source.manifest.artifact_id}
    with grpc.insecure_channel(source.endpoint) as channel:
        stub = mx_p2p_grpc.WorkerServiceStub(channel)
        with pytest.raises(grpc.RpcError) as caught:
            getattr(stub, call)(request_type(**(ids | fields)), timeout=10)
    assert caught.value.code() == getattr(grpc.StatusCode, code)
    assert message in (caught.value.details() or "")


class HostileWorker(p2p_pb2_grpc.WorkerServiceServicer):
    """Serves a manifest it was handed, however unsafe (its id matches its content)."""

    def __init__(self, manifest: ArtifactManifest) -> None:
        self.manifest = manifest

    def GetArtifactManifestHeader(self, request: Any, context: Any) -> Any:  # noqa: N802
        m = self.manifest
        return p2p_pb2.GetArtifactManifestHeaderResponse(
            mx_source_id=request.mx_source_id,
            artifact_id=m.artifact_id,
            manifest_version=m.manifest_version,
            mx_source_type=TORCH_COMPILE,
            total_size=m.total_size,
            file_count=len(m.files),
            chunk_count=len(m.chunks),
            chunk_size=m.chunk_size,
            files=files_pb(m),
        )

    def GetArtifactManifestChunks(self, request: Any, context: Any) -> Any:  # noqa: N802
        chunks = [chunk_pb(c) for c in self.manifest.chunks]
        return p2p_pb2.GetArtifactManifestChunksResponse(
            artifact_id=self.manifest.artifact_id, chunks=chunks
        )


@pytest.mark.parametrize(
    "unsafe",
    [
        {"path": "../escape.txt"},
        {"path": "a/../../escape.txt"},
        {"path": "/tmp/escape.txt"},
        {"path": "a//b"},
        {"path": "a\\..\\b"},
        {"size": 1 << 50},  # absurd: refused before a byte moves
    ],
)
def test_a_manifest_escaping_the_destination_is_refused(
    serve: Callable[..., Source],
    fetcher: tuple[ArtifactFetcher, CollectorRegistry],
    tmp_path: Path,
    unsafe: dict[str, Any],
) -> None:
    honest = serve().manifest
    files = list(honest.files)
    files[0] = replace(files[0], **unsafe)
    hostile = ArtifactManifest(
        honest.mx_source_type, honest.chunk_size, tuple(files), honest.chunks
    )
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    p2p_pb2_grpc.add_WorkerServiceServicer_to_server(HostileWorker(hostile), server)  # type: ignore[no-untyped-call]
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    target, registry = fetcher
    try:
        with pytest.raises(ArtifactTransferError) as caught:
            target.fetch(f"127.0.0.1:{port}", SOURCE_ID, hostile.artifact_id, tmp_path / "d" / "tc")
    finally:
        server.stop(None)
    assert caught.value.reason == "unsafe_manifest"
    assert not (tmp_path / "escape.txt").exists()
    assert not (tmp_path / "d" / "tc").exists()
    failures = {"artifact": "unknown", "reason": "unsafe_manifest"}
    assert sample(registry, "mx_artifact_transfer_failures_total", **failures) == 1


def test_our_artifact_id_is_modelexpress_s(tmp_path: Path) -> None:
    from modelexpress.metadata.artifact_manifest import (
        artifact_manifest_id,
        artifact_source_metadata,
    )

    root = tmp_path / "cache"
    root.mkdir()
    make_cache(root)
    ours, paths = build_manifest(root, TORCH_COMPILE, 1 << 20, SETTINGS.limits())
    assert [f.path for f in ours.files] == [
        "alias.json",
        "empty.lock",
        "fxgraph/ab/entry.bin",
        "triton/k1/kernel.json",
    ]
    assert all(p.is_relative_to(root) for p in paths)
    wire = mx_p2p.ArtifactManifest(
        manifest_version=1,
        mx_source_type=TORCH_COMPILE,
        chunk_size=1 << 20,
        files=[
            mx_p2p.ArtifactManifestFile.FromString(f.SerializeToString()) for f in files_pb(ours)
        ],
        chunks=[
            mx_p2p.ArtifactManifestChunk.FromString(chunk_pb(c).SerializeToString())
            for c in ours.chunks
        ],
    )
    assert artifact_manifest_id(wire) == ours.artifact_id
    theirs = artifact_source_metadata(wire, node_rank=3).SerializeToString(deterministic=True)
    assert source_metadata_pb(ours, node_rank=3).SerializeToString(deterministic=True) == theirs
    with pytest.raises(UnsafeManifestError, match="over"):
        build_manifest(root, TORCH_COMPILE, 1 << 20, ArtifactLimits(max_total_bytes=1024))
