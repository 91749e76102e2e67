"""The controller's scale-up warm-starts from a live replica: with the registry configured,
every reference engine it launches is told the registry's address and serves its weights,
so the second replica pulls them over NIXL from the first instead of reading the cache."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import grpc
import httpx
import modelexpress.p2p_pb2 as mx_p2p
import modelexpress.p2p_pb2_grpc as mx_p2p_grpc
import pytest

from flexinfer_common.serving import serve_in_background
from flexinfer_controller.adapters.registry.settings import RegistryClientSettings
from flexinfer_controller.testing import eventually, model_doc, run_controller
from flexinfer_engine.core.weights import generate_model
from flexinfer_registry.app import create_app as create_registry
from flexinfer_registry.settings import RegistrySettings


def _ready_sources(registry: str) -> int:
    request = mx_p2p.ListSourcesRequest(
        model_name_filter="tiny", status_filter=mx_p2p.SOURCE_STATUS_READY
    )
    with grpc.insecure_channel(registry) as channel:
        reply = mx_p2p_grpc.P2pServiceStub(channel).ListSources(request, timeout=10)
    return len(reply.instances)


async def _wait_sources(registry: str, count: int) -> None:
    await eventually(
        lambda: asyncio.to_thread(lambda: _ready_sources(registry) >= count), timeout_s=120
    )


async def _weights(url: str) -> dict[str, Any]:
    async with httpx.AsyncClient(timeout=10) as client:
        body: dict[str, Any] = (await client.get(f"{url}/healthz")).json()
    return dict(body["weights"])


@pytest.mark.slow
async def test_a_second_replica_pulls_its_weights_from_the_first(tmp_path: Path) -> None:
    model_dir = generate_model(tmp_path / "tiny", name="tiny", preset="tiny")
    registry_app: Any = create_registry(
        RegistrySettings(port=0, grpc_port=0, cache_dir=tmp_path / "registry")
    )
    async with serve_in_background(registry_app):
        registry = str(registry_app.state.grpc_address)
        async with run_controller(
            tmp_path,
            engine_python=sys.executable,
            engine_startup_timeout_s=120.0,
            registry=RegistryClientSettings(address=registry),
        ) as h:
            await h.put_model(model_doc("tiny", model_dir.as_uri(), minReplicas=1, maxReplicas=2))
            first = await h.endpoints_event("default/tiny", timeout_s=120, count=1)
            (one,) = [e.url for e in first.endpoints]
            assert (await _weights(one))["strategy"] in ("gds", "default")
            await _wait_sources(registry, 1)

            await h.put_model(model_doc("tiny", model_dir.as_uri(), minReplicas=2, maxReplicas=2))
            both = await h.endpoints_event("default/tiny", timeout_s=120, count=2)
            (two,) = [e.url for e in both.endpoints if e.url != one]
            weights = await _weights(two)
            assert weights["strategy"] == "rdma", weights
            pid = (await h.client.get(f"{one}/engine/info")).json()["pid"]
            assert weights["source"].endswith(f"-{pid}")  # replica 1's worker: <host>-<pid>
            await _wait_sources(registry, 2)  # and it serves the next replica in turn
            assert (await h.client.delete("/v1/admin/models/tiny")).status_code == 204
