"""The engine as a source for its peers: served over NIXL while awake (a peer pulls every
weight through the registry), withdrawn (STALE) while asleep, served again once awake."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import grpc
import httpx
import modelexpress.p2p_pb2 as mx_p2p
import modelexpress.p2p_pb2_grpc as mx_p2p_grpc
import pytest
import torch

from flexinfer_common.serving import serve_in_background
from flexinfer_engine.app import create_app
from flexinfer_engine.core.model import DecoderLM
from flexinfer_engine.core.weights import generate_model
from flexinfer_engine.settings import EngineSettings
from flexinfer_registry.app import create_app as create_registry
from flexinfer_registry.settings import RegistrySettings
from flexinfer_testing.clients import wait_until
from flexinfer_testing.engines import loaded_engine
from flexinfer_transfer import LoadContext
from flexinfer_transfer.nixl_manager import NixlTransferManager
from flexinfer_transfer.nixl_transport import NixlTransport
from flexinfer_transfer.registry_directory import RegistryDirectory

NAME = "peer-tiny"


def _listed(registry: str, status: int) -> list[str]:
    request = mx_p2p.ListSourcesRequest(model_name_filter=NAME, status_filter=status)
    with grpc.insecure_channel(registry) as channel:
        reply = mx_p2p_grpc.P2pServiceStub(channel).ListSources(request)
    return [ref.worker_id for ref in reply.instances]


class _Target:
    def __init__(self, module: torch.nn.Module) -> None:
        self.module = module


def _pull(registry: str, skeleton: DecoderLM) -> dict[str, torch.Tensor]:
    transport = NixlTransport(
        NixlTransferManager("peer-target"), RegistryDirectory(registry), _Target(skeleton)
    )
    ctx = LoadContext(Path("."), accelerator="cpu", model_name=NAME)
    (candidate,) = transport.list_sources(ctx)
    return transport.receive(candidate, ctx)


async def test_the_engine_serves_its_weights_to_a_peer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model_dir = generate_model(tmp_path / "model", name=NAME, preset="tiny")
    engine = loaded_engine(model_dir)
    registry_app: Any = create_registry(
        RegistrySettings(port=0, grpc_port=0, cache_dir=tmp_path / "cache")
    )
    async with serve_in_background(registry_app):
        registry = str(registry_app.state.grpc_address)
        monkeypatch.setenv("FLEXINFER_TRANSFER_SOURCE_REGISTRY", registry)
        monkeypatch.setenv("FLEXINFER_TRANSFER_SOURCE_HEARTBEAT_INTERVAL_S", "0.5")
        settings = EngineSettings(
            model_dir=model_dir, served_model_name=NAME, p2p_source=True, worker_id="engine-a"
        )
        async with (
            serve_in_background(create_app(settings, engine=engine)) as url,
            httpx.AsyncClient(base_url=url, timeout=60.0) as http,  # a loaded machine: no 5 s bound
        ):
            ready = mx_p2p.SOURCE_STATUS_READY
            await asyncio.to_thread(wait_until, lambda: _listed(registry, ready), 30, "READY")
            skeleton = DecoderLM(engine.config)
            got = await asyncio.to_thread(_pull, registry, skeleton)
            want = engine.model.state_dict()
            assert sorted(got) == sorted(want)
            assert all(torch.equal(got[k], v) for k, v in want.items())

            assert (await http.post("/sleep?level=1")).status_code == 200
            assert await asyncio.to_thread(_listed, registry, ready) == []
            stale = mx_p2p.SOURCE_STATUS_STALE
            assert await asyncio.to_thread(_listed, registry, stale) == ["engine-a"]
            assert (await http.post("/wake_up")).status_code == 200
            await asyncio.to_thread(wait_until, lambda: _listed(registry, ready), 30, "READY")
        # Shut down: withdrawn again.
        assert await asyncio.to_thread(_listed, registry, ready) == []
