"""The controller's scale-up warm-starts from a live replica: with the registry configured,
every reference engine it launches is told the registry's address and serves its weights,
so the second replica pulls them over NIXL from the first instead of reading the cache.
With a registry started with tokens (as compose runs it), engines are handed its P2P token,
never the controller's admin token."""

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

ADMIN = "admin-token-0123456789abcdef"
P2P = "p2p-token-0123456789abcdef"


def _ready_sources(registry: str, token: str | None) -> int:
    request = mx_p2p.ListSourcesRequest(
        model_name_filter="tiny", status_filter=mx_p2p.SOURCE_STATUS_READY
    )
    metadata = (("authorization", f"Bearer {token}"),) if token else ()
    with grpc.insecure_channel(registry) as channel:
        reply = mx_p2p_grpc.P2pServiceStub(channel).ListSources(
            request, timeout=10, metadata=metadata
        )
    return len(reply.instances)


async def _wait_sources(registry: str, count: int, token: str | None) -> None:
    await eventually(
        lambda: asyncio.to_thread(lambda: _ready_sources(registry, token) >= count),
        timeout_s=120,
    )


def _environ(pid: int) -> str:
    """The engine process's environment, as the kernel holds it."""
    return Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")


async def _weights(url: str) -> dict[str, Any]:
    async with httpx.AsyncClient(timeout=10) as client:
        body: dict[str, Any] = (await client.get(f"{url}/healthz")).json()
    return dict(body["weights"])


@pytest.mark.slow
@pytest.mark.parametrize("tokens", [False, True], ids=["open", "tokens"])
async def test_a_second_replica_pulls_its_weights_from_the_first(
    tmp_path: Path, tokens: bool
) -> None:
    model_dir = generate_model(tmp_path / "tiny", name="tiny", preset="tiny")
    secrets: dict[str, Any] = {"auth_token": ADMIN, "p2p_token": P2P} if tokens else {}
    registry_app: Any = create_registry(
        RegistrySettings(port=0, grpc_port=0, cache_dir=tmp_path / "registry", **secrets)
    )
    token = P2P if tokens else None
    async with serve_in_background(registry_app):
        registry = str(registry_app.state.grpc_address)
        async with run_controller(
            tmp_path,
            engine_python=sys.executable,
            engine_startup_timeout_s=120.0,
            registry=RegistryClientSettings(address=registry, **secrets),
        ) as h:
            await h.put_model(model_doc("tiny", model_dir.as_uri(), minReplicas=1, maxReplicas=2))
            first = await h.endpoints_event("default/tiny", timeout_s=120, count=1)
            (one,) = [e.url for e in first.endpoints]
            assert (await _weights(one))["strategy"] in ("gds", "default")
            await _wait_sources(registry, 1, token)
            pid = (await h.client.get(f"{one}/engine/info")).json()["pid"]
            environ = _environ(pid)
            assert ADMIN not in environ
            assert (f"FLEXINFER_ENGINE_REGISTRY_TOKEN={P2P}" in environ) == tokens

            # Scaling changes spec.serverless alone: replica 1 serves on, one more starts.
            await h.put_model(model_doc("tiny", model_dir.as_uri(), minReplicas=2, maxReplicas=2))
            both = await h.endpoints_event("default/tiny", timeout_s=120, count=2)
            (new,) = [e.url for e in both.endpoints if e.url != one]
            weights = await _weights(new)
            assert weights["strategy"] == "rdma", weights
            assert weights["source"].endswith(f"-{pid}")  # replica 1's worker: <host>-<pid>
            assert (await h.client.get(f"{one}/engine/info")).json()["pid"] == pid
            await _wait_sources(registry, 2, token)  # and they serve the next replica in turn
            assert (await h.client.delete("/v1/admin/models/tiny")).status_code == 204
