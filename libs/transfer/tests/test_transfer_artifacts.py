"""Artifact transfer (p2p.proto's artifact RPCs) over a real gRPC server and NIXL READs on
loopback: a compile-cache tree installed byte for byte, a corrupt chunk retried or the
fetch abandoned with nothing installed, and traversal or oversized manifests refused."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from concurrent import futures
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import grpc
import modelexpress.p2p_pb2 as mx_p2p
import modelexpress.p2p_pb2_grpc as mx_p2p_grpc
import pytest
from prometheus_client import CollectorRegistry

from flexinfer_common.mx_identity import SourceIdentity
from flexinfer_transfer._generated import p2p_pb2, p2p_pb2_grpc
from flexinfer_transfer.artifact_fetch import ArtifactFetcher, ArtifactTransferError
from flexinfer_transfer.artifact_manifest import (
    ArtifactLimits,
    ArtifactManifest,
    UnsafeManifestError,
    build_manifest,
)
from flexinfer_transfer.artifact_proto import chunk_pb, files_pb
from flexinfer_transfer.artifact_server import ArtifactServer, ChunkReader, read_range
from flexinfer_transfer.artifact_settings import ArtifactSettings
from flexinfer_transfer.directory import SourceManifest
from flexinfer_transfer.metrics import TransferMetrics
from flexinfer_transfer.nixl_manager import NixlSettings, NixlTransferManager
from flexinfer_transfer.worker_service import ServedWorker, serve_worker

TORCH_COMPILE = p2p_pb2.MX_SOURCE_TYPE_TORCH_COMPILE_CACHE
SOURCE_ID = SourceIdentity(
    mx_version="0.7.0", model_name="Org/Cached", mx_source_type=TORCH_COMPILE
).mx_source_id
SETTINGS = ArtifactSettings(chunk_mib=1, transfer_timeout_s=20)
NIXL = NixlSettings(transfer_timeout_s=20)


def make_cache(root: Path) -> dict[str, bytes]:
    """A small compile-cache tree; returns what a target should install, by path."""
    want = {
        "fxgraph/ab/entry.bin": os.urandom((2 << 20) + 12345),  # three 1 MiB chunks
        "triton/k1/kernel.json": b'{"name": "k1"}',
        "empty.lock": b"",
    }
    for path, data in want.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(data)
    (root / "alias.json").symlink_to(root / "triton/k1/kernel.json")  # inside: served
    want["alias.json"] = want["triton/k1/kernel.json"]
    secret = root.parent / "secret.txt"
    secret.write_bytes(b"not yours")
    (root / "leak.txt").symlink_to(secret)  # escapes the root: never served
    (root / "outside").symlink_to(root.parent, target_is_directory=True)
    return want


def tree(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` by relative path."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@dataclass
class Source:
    """A served artifact."""

    endpoint: str
    root: Path
    server: ArtifactServer
    manifest: ArtifactManifest
    want: dict[str, bytes]


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., Source]]:
    """Starts WorkerServices serving a fresh cache tree, with an optional chunk reader."""
    started: list[tuple[Any, ArtifactServer]] = []

    def start(reader: ChunkReader = read_range) -> Source:
        root = tmp_path / f"cache{len(started)}"
        root.mkdir()
        want = make_cache(root)
        manager = NixlTransferManager(f"artifact-source-{len(started)}", NIXL)
        artifacts = ArtifactServer(manager, SETTINGS, reader=reader)
        manifest = artifacts.publish(SOURCE_ID, root, TORCH_COMPILE)
        worker = ServedWorker(SOURCE_ID, "w-1", 0, SourceManifest("none", b"", []))
        server, port = serve_worker(worker, "127.0.0.1", artifacts=artifacts)
        started.append((server, artifacts))
        return Source(f"127.0.0.1:{port}", root, artifacts, manifest, want)

    yield start
    for server, artifacts in started:
        server.stop(None)
        artifacts.close()


@pytest.fixture
def fetcher() -> Iterator[tuple[ArtifactFetcher, CollectorRegistry]]:
    """A target's fetcher and the registry its metrics are on."""
    registry = CollectorRegistry()
    manager = NixlTransferManager("artifact-target", NIXL)
    yield ArtifactFetcher(manager, TransferMetrics(registry), SETTINGS), registry
    manager.close()


def corrupting(chunk_offset: int, times: int) -> ChunkReader:
    """A reader that flips one byte of the chunk at ``chunk_offset`` its first ``times``
    reads (``times`` < 0: always)."""
    calls = {"n": 0}

    def read(path: Path, offset: int, into: memoryview) -> None:
        read_range(path, offset, into)
        if offset == chunk_offset and path.name == "entry.bin":
            calls["n"] += 1
            if times < 0 or calls["n"] <= times:
                into[7] ^= 0xFF

    return read


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float:
    """A metric's value (0 when absent)."""
    return registry.get_sample_value(name, labels) or 0.0


def test_a_compile_cache_is_installed_byte_for_byte(
    serve: Callable[..., Source], fetcher: tuple[ArtifactFetcher, CollectorRegistry], tmp_path: Path
) -> None:
    source = serve()
    target, registry = fetcher
    dest = tmp_path / "installed" / "torch_compile"
    got = target.fetch(source.endpoint, SOURCE_ID, source.manifest.artifact_id, dest)
    assert tree(dest) == source.want  # the escaping symlinks were never served
    assert not any(p.is_symlink() for p in dest.rglob("*"))
    assert (got.artifact_id, got.size, got.chunks_retried) == (
        source.manifest.artifact_id,
        sum(len(v) for v in source.want.values()),
        0,
    )
    assert sample(registry, "mx_artifact_install_bytes_total", artifact="torch_compile_cache") == (
        got.size
    )
    assert source.server.slots.lent() == 0  # every lease was released
    assert os.listdir(dest.parent) == ["torch_compile"]  # no staging left behind


def test_modelexpress_client_reads_our_manifest_and_a_chunk(
    serve: Callable[..., Source], fetcher: tuple[ArtifactFetcher, CollectorRegistry]
) -> None:
    from modelexpress.metadata.artifact_manifest import _crc32c_hex, artifact_manifest_id
    from modelexpress.metadata.artifact_transfer import (
        _fetch_all_chunks,
        _validate_fetched_artifact_manifest,
    )
    from modelexpress.metadata.worker_server import (
        fetch_artifact_manifest_header,
        prepare_artifact_chunk,
        release_artifact_chunk,
    )

    source = serve()
    header, _ = fetch_artifact_manifest_header(source.endpoint, SOURCE_ID)  # id omitted: the one
    chunks = _fetch_all_chunks(
        source.endpoint, SOURCE_ID, header.artifact_id, expected_chunk_count=header.chunk_count
    )
    # modelexpress's own check: counts, tiling, and the id as the manifest's SHA-256.
    _validate_fetched_artifact_manifest(header, chunks, source.manifest.artifact_id)
    mx_manifest = mx_p2p.ArtifactManifest(
        manifest_version=header.manifest_version,
        mx_source_type=header.mx_source_type,
        chunk_size=header.chunk_size,
        files=header.files,
        chunks=chunks,
    )
    assert artifact_manifest_id(mx_manifest) == source.manifest.artifact_id
    assert (header.chunk_size, header.file_count) == (1 << 20, len(source.want))
    prepared, _ = prepare_artifact_chunk(source.endpoint, SOURCE_ID, header.artifact_id, 1)
    assert source.server.slots.lent() == 1
    manager = fetcher[0].manager
    import torch

    from flexinfer_transfer.pools import Region, tensor_region

    into = torch.zeros(prepared.source.length, dtype=torch.uint8)
    registration = manager.register([tensor_region(into)], "DRAM")
    agent = manager.connect(prepared.source_metadata)
    manager.read(
        agent,
        [tensor_region(into)],
        [Region(prepared.source.addr, prepared.source.length, prepared.source.device_id)],
        "DRAM",
    )
    manager.disconnect(agent)
    manager.release(registration)
    assert _crc32c_hex(into.numpy().tobytes()) == chunks[1].checksum == prepared.chunk.checksum
    entry = source.want["fxgraph/ab/entry.bin"]
    assert into.numpy().tobytes() == entry[prepared.chunk.file_offset :][: prepared.source.length]
    released, _ = release_artifact_chunk(
        source.endpoint, SOURCE_ID, header.artifact_id, prepared.lease_id
    )
    assert released.chunk.chunk_index == 1
    assert source.server.slots.lent() == 0


def test_a_chunk_corrupt_once_is_read_again_and_installed(
    serve: Callable[..., Source], fetcher: tuple[ArtifactFetcher, CollectorRegistry], tmp_path: Path
) -> None:
    source = serve(corrupting(chunk_offset=1 << 20, times=1))
    target, registry = fetcher
    dest = tmp_path / "cache"
    got = target.fetch(source.endpoint, SOURCE_ID, source.manifest.artifact_id, dest)
    assert got.chunks_retried == 1
    assert tree(dest) == source.want
    assert sample(registry, "mx_artifact_chunk_retries_total", artifact="torch_compile_cache") == 1


def test_a_chunk_corrupt_every_time_falls_back_and_installs_nothing(
    serve: Callable[..., Source], fetcher: tuple[ArtifactFetcher, CollectorRegistry], tmp_path: Path
) -> None:
    source = serve(corrupting(chunk_offset=1 << 20, times=-1))
    target, registry = fetcher
    parent = tmp_path / "caches"
    with pytest.raises(ArtifactTransferError, match="CRC32C on all 3 attempts") as caught:
        target.fetch(source.endpoint, SOURCE_ID, source.manifest.artifact_id, parent / "tc")
    assert caught.value.reason == "checksum"
    assert os.listdir(parent) == []  # neither the artifact nor its staging directory
    labels = {"artifact": "torch_compile_cache"}
    assert sample(registry, "mx_artifact_chunk_retries_total", **labels) == 3
    assert sample(registry, "mx_artifact_transfer_failures_total", **labels, reason="checksum") == 1
    assert sample(registry, "mx_artifact_install_bytes_total", **labels) == 0
    assert source.server.slots.lent() == 0


def test_a_file_changed_after_publish_is_not_served(
    serve: Callable[..., Source], fetcher: tuple[ArtifactFetcher, CollectorRegistry], tmp_path: Path
) -> None:
    source = serve()
    (source.root / "fxgraph/ab/entry.bin").write_bytes(b"rebuilt")  # a compile cache grows
    with pytest.raises(ArtifactTransferError, match="changed since it was published") as caught:
        fetcher[0].fetch(source.endpoint, SOURCE_ID, "", tmp_path / "tc")
    assert caught.value.reason == "failed_precondition"
    assert not (tmp_path / "tc").exists()


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
    from modelexpress.metadata.artifact_manifest import artifact_manifest_id

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
    with pytest.raises(UnsafeManifestError, match="over"):
        build_manifest(root, TORCH_COMPILE, 1 << 20, ArtifactLimits(max_total_bytes=1024))


def test_metrics_are_opt_in_with_mx_metrics_enabled() -> None:
    for env, exported in (
        ({}, False),
        ({"MX_METRICS_ENABLED": "0"}, False),
        ({"MX_METRICS_ENABLED": "1"}, True),
    ):
        registry = CollectorRegistry()
        metrics = TransferMetrics.opt_in(registry, env)
        metrics.selections.labels("random", "src-1").inc()
        value = registry.get_sample_value(
            "mx_p2p_source_selections_total", {"policy": "random", "source": "src-1"}
        )
        assert (value == 1) is exported
