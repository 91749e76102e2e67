"""Artifact transfer (p2p.proto's artifact RPCs) over a real gRPC server and NIXL READs on
loopback: a compile-cache tree installed byte for byte (by our fetcher and by
modelexpress's own target), a corrupt chunk retried or the fetch abandoned with nothing
installed, and the opt-in metrics."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import modelexpress.p2p_pb2 as mx_p2p
import pytest
from prometheus_client import CollectorRegistry

from flexinfer_testing.artifacts import (
    SOURCE_ID,
    Source,
    artifact_fixtures,
    corrupting,
    sample,
    tree,
)
from flexinfer_transfer.artifact_fetch import ArtifactFetcher, ArtifactTransferError
from flexinfer_transfer.artifact_server import read_range
from flexinfer_transfer.metrics import TransferMetrics

serve, fetcher = artifact_fixtures()


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
        fetch_artifact_manifest_chunks,
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
    page, _ = fetch_artifact_manifest_chunks(
        source.endpoint, SOURCE_ID, header.artifact_id, start_chunk_index=1, max_chunks=2
    )
    assert ([c.chunk_index for c in page.chunks], page.next_page_token) == ([1, 2], "3")
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


def test_modelexpress_target_installs_our_artifact(
    serve: Callable[..., Source], tmp_path: Path
) -> None:
    """modelexpress's whole target path: 4 chunks in flight, its NIXL READs, its CRC32C."""
    from modelexpress.accelerators.cuda import CudaAcceleratorBackend
    from modelexpress.metadata.artifact_transfer import transfer_artifact_from_worker
    from modelexpress.nixl_transfer import NixlTransferManager as MxNixlManager

    class HostMemoryOnly(CudaAcceleratorBackend):  # type: ignore[misc]
        """This CPU host has no CUDA device to select; artifacts move in DRAM anyway."""

        def set_device(self, device_id: int) -> None:
            """Nothing to select."""

    source = serve()
    mx_manager = MxNixlManager("mx-target", 0, accelerator_backend=HostMemoryOnly())
    mx_manager.initialize()
    out = tmp_path / "mx"
    try:
        header = transfer_artifact_from_worker(
            source.endpoint,
            SOURCE_ID,
            source.manifest.artifact_id,
            mx_manager,
            timeout=20,
            target_file_paths=[out / f.path for f in source.manifest.files],
        )
    finally:
        mx_manager.shutdown()
    assert header.chunk_count == len(source.manifest.chunks) > 3  # more than one batch
    assert tree(out) == source.want
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
    assert sample(registry, "mx_artifact_chunk_retries_total", **labels) == 2  # 3 reads
    assert sample(registry, "mx_artifact_transfer_failures_total", **labels, reason="checksum") == 1
    assert sample(registry, "mx_artifact_install_bytes_total", **labels) == 0
    assert source.server.slots.lent() == 0


def test_a_source_failing_mid_artifact_leaves_nothing_installed(
    serve: Callable[..., Source], fetcher: tuple[ArtifactFetcher, CollectorRegistry], tmp_path: Path
) -> None:
    def vanishing(path: Path, offset: int, into: memoryview) -> None:
        if offset > 0:  # the second chunk of entry.bin: the first chunks already landed
            raise OSError(f"{path}: the cache volume went away")
        read_range(path, offset, into)

    source = serve(vanishing)
    parent = tmp_path / "caches"
    with pytest.raises(ArtifactTransferError, match="went away") as caught:
        fetcher[0].fetch(source.endpoint, SOURCE_ID, source.manifest.artifact_id, parent / "tc")
    assert caught.value.reason == "failed_precondition"
    assert os.listdir(parent) == []  # the partial staging directory is gone too
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
