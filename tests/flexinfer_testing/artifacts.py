"""Artifact transfer test helpers: a compile-cache tree, served sources and what to check."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from flexinfer_common.mx_identity import SourceIdentity
from flexinfer_transfer._generated import p2p_pb2
from flexinfer_transfer.artifact_fetch import ArtifactFetcher
from flexinfer_transfer.artifact_manifest import ArtifactManifest
from flexinfer_transfer.artifact_server import ArtifactServer, ChunkReader, read_range
from flexinfer_transfer.artifact_settings import ArtifactSettings
from flexinfer_transfer.artifact_source import ArtifactRole, ArtifactSource, seal_directory
from flexinfer_transfer.directory import SourceManifest
from flexinfer_transfer.metrics import TransferMetrics
from flexinfer_transfer.nixl_manager import NixlSettings, NixlTransferManager
from flexinfer_transfer.worker_service import ServedWorker, serve_worker

TORCH_COMPILE = p2p_pb2.MX_SOURCE_TYPE_TORCH_COMPILE_CACHE
SOURCE_ID = SourceIdentity(
    mx_version="0.7.0", model_name="Org/Cached", mx_source_type=TORCH_COMPILE
).mx_source_id
SETTINGS = ArtifactSettings(chunk_mib=1, transfer_timeout_s=20)
"""1 MiB chunks: a 2 MiB file spans three, so retries and pages are exercised cheaply."""
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


class ArtifactSources:
    """WorkerServices each serving a fresh cache tree under ``workdir``."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self._started: list[tuple[Any, ArtifactServer]] = []

    def start(self, reader: ChunkReader = read_range) -> Source:
        """Publish a new cache tree (read through ``reader``) and serve it."""
        root = self.workdir / f"cache{len(self._started)}"
        root.mkdir()
        want = make_cache(root)
        manager = NixlTransferManager(f"artifact-source-{len(self._started)}", NIXL)
        artifacts = ArtifactServer(manager, SETTINGS, reader=reader)
        manifest = artifacts.publish(SOURCE_ID, root, TORCH_COMPILE)
        worker = ServedWorker(SOURCE_ID, "w-1", 0, SourceManifest("none", b"", []))
        server, port = serve_worker(worker, "127.0.0.1", artifacts=artifacts)
        self._started.append((server, artifacts))
        return Source(f"127.0.0.1:{port}", root, artifacts, manifest, want)

    def close(self) -> None:
        """Stop every server and deregister its slots."""
        for server, artifacts in self._started:
            server.stop(None)
            artifacts.close()


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


Fetcher = tuple[ArtifactFetcher, CollectorRegistry]


def artifact_fixtures() -> tuple[Callable[..., object], Callable[[], Iterator[Fetcher]]]:
    """The ``serve`` and ``fetcher`` fixtures of the artifact tests; assign them in a test
    module: ``serve, fetcher = artifact_fixtures()``."""

    @pytest.fixture
    def serve(tmp_path: Path) -> Iterator[Callable[..., Source]]:
        """Starts WorkerServices serving a fresh cache tree, with an optional chunk reader."""
        sources = ArtifactSources(tmp_path)
        yield sources.start
        sources.close()

    @pytest.fixture
    def fetcher() -> Iterator[Fetcher]:
        """A target's fetcher and the registry its metrics are on."""
        registry = CollectorRegistry()
        manager = NixlTransferManager("artifact-target", NIXL)
        yield ArtifactFetcher(manager, TransferMetrics(registry), SETTINGS), registry
        manager.close()

    return serve, fetcher


def corrupt_in_place(path: Path) -> None:
    """Flip a byte in the middle of ``path``, keeping its size and mtime: a source still
    serves it (it looks unchanged since publication) and only a CRC32C can tell."""
    stat = path.stat()
    with path.open("r+b") as handle:
        handle.seek(stat.st_size // 2)
        byte = handle.read(1)
        handle.seek(stat.st_size // 2)
        handle.write(bytes([byte[0] ^ 0xFF]))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def published_cache(
    registry: str, identity: SourceIdentity, workdir: Path, worker_id: str, accelerator: str = "cpu"
) -> ArtifactSource:
    """A compile-cache tree (``make_cache``) sealed, served and published to ``registry``
    under ``identity``, as an engine in compile mode publishes its own."""
    cache = workdir / f"{worker_id}-cache"
    cache.mkdir(parents=True)
    make_cache(cache)
    bundle = seal_directory(cache, workdir / f"{worker_id}-bundles")
    role = ArtifactRole(identity, worker_id, accelerator, bind_host="127.0.0.1")
    return ArtifactSource(bundle, role, registry=registry, settings=SETTINGS)
