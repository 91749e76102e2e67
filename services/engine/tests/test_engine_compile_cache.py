"""Compile caches travel between replicas: real engine processes in compile mode, a real
registry over gRPC and NIXL over UCX. Replica 1's only donor serves a corrupted file, so
it compiles from scratch and says why, then serves its own sealed inductor cache; replica
2 fetches that, compiles with FX graph cache hits only and answers a seeded completion
identically. (A donor that is gone: test_engine_compile_fallback.py, without compiling.)"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import modelexpress.p2p_pb2 as mx_p2p
import modelexpress.p2p_pb2_grpc as mx_p2p_grpc
import pytest
import torch

from flexinfer_common.mx_identity import SourceIdentity
from flexinfer_common.serving import serve_in_background
from flexinfer_engine.app import fingerprint
from flexinfer_engine.compile_cache import cache_identity
from flexinfer_engine.core.config import read_config
from flexinfer_engine.core.weights import generate_model
from flexinfer_engine.weight_loading import Replica
from flexinfer_registry.app import create_app as create_registry
from flexinfer_registry.settings import RegistrySettings
from flexinfer_testing.artifacts import corrupt_in_place, published_cache
from flexinfer_testing.clients import wait_until
from flexinfer_testing.engines import Process, reference_engine
from flexinfer_testing.scrape import check_conventions, parse_metrics

NAME = "compile-tiny"
PROMPT = {"model": NAME, "prompt": "kernels from a peer", "max_tokens": 12, "seed": 99}
pytestmark = pytest.mark.slow  # one cold inductor compile: 15-40 s of gcc on 2 cores


@pytest.fixture
async def registry(tmp_path: Path) -> AsyncIterator[str]:
    app: Any = create_registry(RegistrySettings(port=0, grpc_port=0, cache_dir=tmp_path / "reg"))
    async with serve_in_background(app):
        yield str(app.state.grpc_address)


def _artifact_sources(registry: str) -> list[str]:
    """worker ids of READY compile-cache sources (GetMetadata says which ones serve one)."""
    request = mx_p2p.ListSourcesRequest(
        model_name_filter=NAME, status_filter=mx_p2p.SOURCE_STATUS_READY
    )
    with grpc.insecure_channel(registry) as channel:
        stub = mx_p2p_grpc.P2pServiceStub(channel)
        refs = stub.ListSources(request, timeout=10).instances
        found = []
        for ref in refs:
            meta = stub.GetMetadata(
                mx_p2p.GetMetadataRequest(mx_source_id=ref.mx_source_id, worker_id=ref.worker_id),
                timeout=10,
            )
            if meta.worker.WhichOneof("source_payload") == "artifact_source":
                found.append(ref.worker_id)
    return found


def _env(registry: str, tmp_path: Path, worker_id: str) -> dict[str, str]:
    return {
        "FLEXINFER_ENGINE_REGISTRY": registry,
        "FLEXINFER_ENGINE_WORKER_ID": worker_id,
        "FLEXINFER_ENGINE_P2P_SOURCE": "1",  # weights and compile cache side by side
        "FLEXINFER_ENGINE_COMPILE": "1",
        "FLEXINFER_ENGINE_COMPILE_CACHE_DIR": str(tmp_path / worker_id / "inductor"),
        "MX_ARTIFACT_TRANSFER": "1",
        "MX_ARTIFACT_BUNDLE_ROOT": str(tmp_path / worker_id / "bundles"),
    }


def _completion(url: str) -> str:
    reply = httpx.post(f"{url}/v1/completions", json=PROMPT, timeout=60)
    reply.raise_for_status()
    return str(reply.json()["choices"][0]["text"])


def _health(url: str) -> dict[str, Any]:
    body: dict[str, Any] = httpx.get(f"{url}/healthz", timeout=10).json()
    return body


def _compile_cache(url: str) -> dict[str, Any]:
    report: dict[str, Any] = _health(url)["compile_cache"]
    return report


def _sample(url: str, metric: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(metric) and not line.startswith("#")
    )


def _cache_identity(model_dir: Path) -> SourceIdentity:
    """The compile-cache identity the engines compute for this model on the CPU."""
    config = read_config(model_dir)
    weights = Replica(NAME, fingerprint(config), "any", "cpu").identity(config)
    return cache_identity(weights, torch.device("cpu"))


async def test_replica_2_compiles_from_replica_1s_cache_after_a_corrupt_donor(
    registry: str, tmp_path: Path
) -> None:
    model_dir = generate_model(tmp_path / "cache" / NAME, name=NAME, preset="tiny")
    await asyncio.to_thread(_replicas, registry, model_dir, tmp_path)


def _replicas(registry: str, model_dir: Path, tmp_path: Path) -> None:
    def start(worker_id: str) -> Any:
        env = _env(registry, tmp_path, worker_id)
        return reference_engine(model_dir, tmp_path / f"{worker_id}.log", name=NAME, env=env)

    # A donor of the right identity whose disk rotted after it sealed its cache.
    donor = published_cache(registry, _cache_identity(model_dir), tmp_path / "donor", "corrupt")
    try:
        corrupt_in_place(donor.bundle / "fxgraph/ab/entry.bin")
        wait_until(lambda: _artifact_sources(registry) == ["corrupt"], 30, "the donor listed")
        with start("replica-1") as one:
            first = _compile_cache(one.url)
            assert first["source"] == "local", one.log_tail()
            assert first["fallback_reason"] == "checksum"
            assert first["cache_misses"] >= 2  # the prefill and the decode graph
            assert first["cache_hits"] == 0
            fallbacks = 'flexinfer_engine_compile_cache_fallbacks_total{reason="checksum"}'
            assert _sample(one.url, fallbacks) == 1
            assert not any((tmp_path / "replica-1").glob(".*partial*"))  # nothing left staged
            donor.stop()
            wait_until(lambda: _artifact_sources(registry) == ["replica-1"], 60, "replica 1")
            with start("replica-2") as two:
                _check_fetched(one, two, first)
                # Target becomes source: the next replica has two donors.
                both = ["replica-1", "replica-2"]
                wait_until(lambda: sorted(_artifact_sources(registry)) == both, 60, "replica 2")
    finally:
        donor.stop()


def _check_fetched(one: Process, two: Process, first: dict[str, Any]) -> None:
    second = _compile_cache(two.url)
    assert second["source"] == "peer", two.log_tail()
    assert second["donor"].endswith("/replica-1")
    assert _health(two.url)["weights"]["strategy"] == "rdma"  # the weights' own source
    assert second["cache_hits"] == first["cache_misses"]
    assert second["cache_misses"] == 0
    assert _completion(two.url) == _completion(one.url)
    installed = 'mx_artifact_install_bytes_total{artifact="torch_compile_cache"}'
    assert _sample(two.url, installed) > 0
    assert _sample(two.url, 'flexinfer_engine_compile_seconds{source="peer"}') > 0
    families = parse_metrics(httpx.get(f"{two.url}/metrics", timeout=10).text)
    assert "flexinfer_engine_compile_cache_fallbacks" in families
    check_conventions(families)
    print(f"compile seconds: cold {first['seconds']:.2f}, fetched cache {second['seconds']:.2f}")
