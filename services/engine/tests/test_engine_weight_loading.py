"""Replicas warm-start from a live one: real engine processes, a real registry over gRPC
and NIXL over UCX. Replica 1 loads the cache directory and publishes itself; replica 2
finds it through ListSources and READs every tensor from it, then answers a seeded
completion identically; a donor killed mid-transfer makes the chain fall back to files."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import grpc
import httpx
import modelexpress.p2p_pb2 as mx_p2p
import modelexpress.p2p_pb2_grpc as mx_p2p_grpc
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from flexinfer_common.serving import serve_in_background
from flexinfer_common.settings import TelemetrySettings
from flexinfer_engine.app import build_engine, create_app
from flexinfer_engine.core.weights import generate_model
from flexinfer_engine.settings import EngineSettings
from flexinfer_registry.app import create_app as create_registry
from flexinfer_registry.settings import RegistrySettings
from flexinfer_testing.clients import wait_until
from flexinfer_testing.engines import Process, reference_engine
from flexinfer_transfer.settings import TransferSettings

NAME = "p2p-tiny"
PROMPT = {"model": NAME, "prompt": "weights from a peer", "max_tokens": 16, "seed": 1234}


@pytest.fixture
async def registry(tmp_path: Path) -> AsyncIterator[str]:
    app: Any = create_registry(RegistrySettings(port=0, grpc_port=0, cache_dir=tmp_path / "reg"))
    async with serve_in_background(app):
        yield str(app.state.grpc_address)


def _ready_workers(registry: str) -> list[str]:
    request = mx_p2p.ListSourcesRequest(
        model_name_filter=NAME, status_filter=mx_p2p.SOURCE_STATUS_READY
    )
    with grpc.insecure_channel(registry) as channel:
        reply = mx_p2p_grpc.P2pServiceStub(channel).ListSources(request, timeout=10)
    return [ref.worker_id for ref in reply.instances]


def _env(registry: str, worker_id: str) -> dict[str, str]:
    return {
        "FLEXINFER_ENGINE_REGISTRY": registry,
        "FLEXINFER_ENGINE_P2P_SOURCE": "1",
        "FLEXINFER_ENGINE_WORKER_ID": worker_id,
    }


def _completion(url: str) -> str:
    reply = httpx.post(f"{url}/v1/completions", json=PROMPT, timeout=60)
    reply.raise_for_status()
    return str(reply.json()["choices"][0]["text"])


def _health(url: str) -> dict[str, Any]:
    body: dict[str, Any] = httpx.get(f"{url}/healthz", timeout=10).json()
    return body


def _sample(url: str, metric: str) -> float:
    """The sum of ``metric``'s samples on the engine's /metrics."""
    text = httpx.get(f"{url}/metrics", timeout=10).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(metric) and not line.startswith("#")
    )


def _model(tmp_path: Path) -> Path:
    """A tiny model in a registry-style cache directory."""
    return generate_model(tmp_path / "cache" / "default_p2p-tiny", name=NAME, preset="tiny")


async def test_replica_2_pulls_every_tensor_from_replica_1(registry: str, tmp_path: Path) -> None:
    # The registry serves on this event loop: everything that blocks runs in a thread.
    await asyncio.to_thread(_two_replicas, registry, _model(tmp_path), tmp_path)


def _two_replicas(registry: str, model_dir: Path, tmp_path: Path) -> None:
    with reference_engine(
        model_dir, tmp_path / "r1.log", name=NAME, env=_env(registry, "replica-1")
    ) as one:
        wait_until(lambda: _ready_workers(registry), 60, "replica 1 READY")
        with reference_engine(
            model_dir, tmp_path / "r2.log", name=NAME, env=_env(registry, "replica-2")
        ) as two:
            first, second = _health(one.url)["weights"], _health(two.url)["weights"]
            assert first["strategy"] in ("gds", "default"), one.log_tail()
            assert second["strategy"] == "rdma", two.log_tail()
            assert second["source"].endswith("/replica-1")
            assert second["seconds"] > 0
            assert _completion(two.url) == _completion(one.url)
            _check_metrics(two)
            # Replica 2 serves its weights in turn: the next replica has two sources.
            wait_until(lambda: len(_ready_workers(registry)) == 2, 60, "replica 2 READY")


def _check_metrics(two: Process) -> None:
    loaded = 'flexinfer_engine_weights_load_seconds{strategy="rdma"}'
    assert _sample(two.url, loaded) > 0
    assert _sample(two.url, 'mx_p2p_transfer_bytes_total{transport="nixl"}') > 1 << 20
    assert _sample(two.url, 'mx_p2p_loads_total{strategy="rdma"}') == 1
    assert _sample(two.url, 'mx_p2p_load_seconds_count{strategy="rdma"}') == 1


async def test_a_donor_killed_mid_transfer_leaves_replica_2_loading_files(
    registry: str, tmp_path: Path
) -> None:
    model_dir = _model(tmp_path)
    with ExitStack() as stack:
        one = await asyncio.to_thread(
            stack.enter_context,
            reference_engine(
                model_dir, tmp_path / "r1.log", name=NAME, env=_env(registry, "replica-1")
            ),
        )
        await asyncio.to_thread(wait_until, lambda: _ready_workers(registry), 60, "replica 1")
        want = await asyncio.to_thread(_completion, one.url)
        batches: list[int] = []

        def kill_after_first_batch(done: int, total: int) -> None:
            batches.append(done)
            if len(batches) == 1:
                assert done < total
                one.proc.kill()
                one.proc.wait(timeout=30)

        settings = EngineSettings(
            model_dir=model_dir,
            served_model_name=NAME,
            registry=registry,
            worker_id="replica-2",
            transfer=TransferSettings(peer_batch_mib=1),  # several READs for the tiny model
            telemetry=TelemetrySettings(otel_enabled=True),
        )
        engine = build_engine(settings, progress=kill_after_first_batch)
        spans = InMemorySpanExporter()
        app = create_app(settings, engine=engine, span_exporter=spans)
        async with serve_in_background(app) as url:
            await app.state.runner.wait_loaded()
            weights = (await asyncio.to_thread(_health, url))["weights"]
            assert weights["strategy"] in ("gds", "default"), weights
            assert weights["source"] == str(model_dir)
            assert len(batches) == 1  # the donor died after the first READ
            assert await asyncio.to_thread(_completion, url) == want
            fallbacks = 'mx_p2p_strategy_fallbacks_total{reason="failed",strategy="rdma"}'
            assert await asyncio.to_thread(_sample, url, fallbacks) == 1
        (span,) = [s for s in spans.get_finished_spans() if s.name == "engine.load_weights"]
        assert span.attributes is not None
        assert span.attributes["flexinfer.weights.strategy"] == weights["strategy"]
        assert "NIXL_ERR_REMOTE_DISCONNECT" in str(span.attributes["flexinfer.weights.skipped"])
