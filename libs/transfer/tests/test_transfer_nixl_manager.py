"""NixlTransferManager's refusals: each failure is a NixlError with a reason, never a hang
or a crash of the process."""

from __future__ import annotations

import pytest
import torch

from flexinfer_transfer.nixl_manager import NixlError, NixlSettings, NixlTransferManager
from flexinfer_transfer.pools import tensor_region


@pytest.fixture(scope="module")
def manager() -> NixlTransferManager:
    """One agent for the module (creating one costs about half a second)."""
    return NixlTransferManager("refusals")


def test_garbage_metadata_is_refused(manager: NixlTransferManager) -> None:
    with pytest.raises(NixlError, match="loading the peer's NIXL metadata failed"):
        manager.connect(b"not nixl metadata")


def test_a_read_from_an_unknown_peer_is_refused(manager: NixlTransferManager) -> None:
    buffer = torch.zeros(16)
    region = tensor_region(buffer)
    with pytest.raises(NixlError, match="preparing a READ from nobody failed"):
        manager.read("nobody", [region], [region], "DRAM")
    with pytest.raises(ValueError, match="as many local regions as remote"):
        manager.read("nobody", [region], [], "DRAM")


def test_fetching_metadata_needs_a_listener_and_a_good_endpoint(
    manager: NixlTransferManager,
) -> None:
    with pytest.raises(NixlError, match="needs listen_port"):
        manager.fetch_metadata("peer", "127.0.0.1:5555")
    listening = NixlTransferManager("listening", NixlSettings(listen_port=0))
    with pytest.raises(NixlError, match="bad NIXL metadata endpoint 'no-port'"):
        listening.fetch_metadata("peer", "no-port")


def test_register_pools_and_releases(manager: NixlTransferManager) -> None:
    pool = torch.zeros(64)
    halves = [tensor_region(pool[:32]), tensor_region(pool[32:])]
    pooled = manager.register(halves, "DRAM")
    assert len(pooled.regions) == 1  # two touching tensors, one registration
    single = manager.register(halves, "DRAM", pooled=False)
    assert len(single.regions) == 2
    for registration in (pooled, single):
        manager.release(registration)
    manager.close()
