"""PeerSource: a loaded module served to peers through the registry (central mode) and the
WorkerService (k8s-service mode) at once, then withdrawn: STALE, drained, gone."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import modelexpress.p2p_pb2 as mx_p2p
import modelexpress.p2p_pb2_grpc as mx_p2p_grpc
import pytest
import torch
from prometheus_client import CollectorRegistry

from flexinfer_common.serving import serve_in_background
from flexinfer_registry.app import create_app
from flexinfer_registry.settings import RegistrySettings
from flexinfer_testing.clients import wait_until
from flexinfer_transfer import LoadContext, TransferMetrics
from flexinfer_transfer.directory import SourceDirectory
from flexinfer_transfer.k8s_service_directory import K8sServiceDirectory, K8sServiceSettings
from flexinfer_transfer.nixl_manager import NixlSettings, NixlTransferManager
from flexinfer_transfer.nixl_transport import NixlTransport
from flexinfer_transfer.peer_source import PeerSource, PeerSourceSettings, SourceRole
from flexinfer_transfer.registry_directory import RegistryDirectory
from flexinfer_transfer.testing import ModuleTarget
from flexinfer_transfer.testing_nixl import PeerModel, identity, seeded

MODEL = "org/peer-source"


@pytest.fixture
async def registry(tmp_path: Path) -> AsyncIterator[str]:
    """The registry's gRPC address (in-process, memory store)."""
    settings = RegistrySettings(port=0, grpc_port=0, cache_dir=tmp_path / "cache")
    app: Any = create_app(settings)
    async with serve_in_background(app):
        yield str(app.state.grpc_address)


def _receive(directory: SourceDirectory, manager: NixlTransferManager) -> dict[str, torch.Tensor]:
    target = ModuleTarget(PeerModel, seeded(PeerModel(), 999))
    transport = NixlTransport(
        manager, directory, target, metrics=TransferMetrics(CollectorRegistry())
    )
    ctx = LoadContext(Path("."), accelerator="cpu", model_name=MODEL, target=target)
    (candidate,) = transport.list_sources(ctx)
    return transport.receive(candidate, ctx)


def _listed(address: str, status: int) -> list[str]:
    request = mx_p2p.ListSourcesRequest(model_name_filter=MODEL, status_filter=status)
    with grpc.insecure_channel(address) as channel:
        reply = mx_p2p_grpc.P2pServiceStub(channel).ListSources(request)
    return [ref.worker_id for ref in reply.instances]


def _serve_pull_and_withdraw(registry: str) -> None:
    want = seeded(PeerModel(), 5).state_dict()
    role = SourceRole(identity(MODEL), "engine-1", accelerator="cpu")
    source = PeerSource(seeded(PeerModel(), 5), role, PeerSourceSettings(registry=registry))
    assert source.publisher is not None
    source.publisher.published.wait(30)
    assert _listed(registry, mx_p2p.SOURCE_STATUS_READY) == ["engine-1"]
    central = _receive(RegistryDirectory(registry), NixlTransferManager("t-central"))
    k8s = K8sServiceDirectory(
        identity(MODEL), K8sServiceSettings(k8s_service_pattern=f"127.0.0.1:{source.grpc_port}")
    )
    listening = NixlTransferManager("t-k8s", NixlSettings(listen_port=0))
    decentralized = _receive(k8s, listening)
    for got in (central, decentralized):
        assert sorted(got) == sorted(want)
        assert all(torch.equal(got[k], v) for k, v in want.items())
    wait_until(lambda: sum(source.source.notifications.values()) == 2, 30, "pull notifications")
    assert source.stop()  # nobody reading: drained at once
    assert _listed(registry, mx_p2p.SOURCE_STATUS_READY) == []
    assert _listed(registry, mx_p2p.SOURCE_STATUS_STALE) == ["engine-1"]


async def test_a_peer_source_serves_both_backends_then_withdraws(registry: str) -> None:
    await asyncio.to_thread(_serve_pull_and_withdraw, registry)
