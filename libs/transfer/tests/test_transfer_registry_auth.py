"""The P2P clients against a registry started with an admin and a P2P token (real gRPC):
with the P2P token the publisher publishes, heartbeats and withdraws and the directory
lists and reads manifests; without it both are refused UNAUTHENTICATED, the publisher says
so at WARNING and retries once per heartbeat interval, and the token is never logged."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from flexinfer_common.mx_identity import SourceIdentity
from flexinfer_common.serving import serve_in_background
from flexinfer_registry.app import create_app
from flexinfer_registry.settings import RegistrySettings
from flexinfer_testing.clients import wait_until
from flexinfer_transfer.directory import RemoteTensor, SourceManifest
from flexinfer_transfer.errors import RegistryAuthError
from flexinfer_transfer.publisher import Publisher, PublisherSettings, worker_metadata
from flexinfer_transfer.registry_directory import RegistryDirectory
from flexinfer_transfer.strategy import LoadContext

ADMIN = "admin-token-0123456789abcdef"
P2P = "p2p-token-0123456789abcdef"
IDENTITY = SourceIdentity(mx_version="0.7.0", model_name="Org/Guarded", dtype="BF16")
MANIFEST = SourceManifest("agent-g", b"nixl-md", [RemoteTensor("w", 4096, 64)], "cpu")


@pytest.fixture
async def registry(tmp_path: Path) -> AsyncIterator[str]:
    """A registry with both tokens; yields its gRPC address."""
    settings = RegistrySettings(
        port=0,
        grpc_port=0,
        cache_dir=tmp_path / "cache",
        auth_token=SecretStr(ADMIN),
        p2p_token=SecretStr(P2P),
    )
    app: Any = create_app(settings)
    async with serve_in_background(app):
        yield str(app.state.grpc_address)


def _publisher(address: str, token: str | None, interval_s: float) -> Publisher:
    return Publisher(
        address,
        IDENTITY,
        "g1",
        worker_metadata(MANIFEST, worker_rank=0),
        PublisherSettings(interval_s=interval_s, retry_s=0.01, call_timeout_s=5),
        token=token,
    )


def _context() -> LoadContext:
    return LoadContext(model_dir=Path("."), model_name=IDENTITY.model_name)


async def test_the_p2p_token_publishes_lists_and_reads(registry: str) -> None:
    publisher = _publisher(registry, P2P, interval_s=0.1)
    publisher.start()
    try:
        await asyncio.to_thread(publisher.published.wait, 30)
        assert publisher.published.is_set()
        await asyncio.to_thread(wait_until, lambda: publisher.heartbeats >= 2, 30, "heartbeats")
        directory = RegistryDirectory(registry, token=P2P)
        (candidate,) = await asyncio.to_thread(directory.list_sources, _context())
        assert candidate.worker_id == "g1"
        manifest = await asyncio.to_thread(directory.manifest, candidate)
        assert manifest.agent_metadata == b"nixl-md"
        assert publisher.failures == 0
    finally:
        await asyncio.to_thread(publisher.stop)
    listed = await asyncio.to_thread(
        RegistryDirectory(registry, token=P2P).list_sources, _context()
    )
    assert listed == []  # STALE at stop, with the same token


async def test_without_the_token_both_are_refused_and_say_why(
    registry: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    directory = RegistryDirectory(registry)
    with pytest.raises(
        RegistryAuthError, match=r"refused ListSources \(no token\): UNAUTHENTICATED"
    ):
        await asyncio.to_thread(directory.list_sources, _context())
    interval_s = 0.5
    publisher = _publisher(registry, None, interval_s)
    started = time.monotonic()
    publisher.start()
    try:
        await asyncio.to_thread(wait_until, lambda: publisher.failures >= 3, 30, "failures")
    finally:
        await asyncio.to_thread(publisher.stop)
    elapsed = time.monotonic() - started
    assert publisher.auth_refused
    assert not publisher.published.is_set()
    # Once per interval, not at retry_s (10 ms) doubling: three tries span two intervals.
    assert publisher.failures <= elapsed / interval_s + 1
    refusals = [
        r for r in caplog.records if r.levelno == logging.WARNING and "refused to let" in r.message
    ]
    assert refusals
    assert "UNAUTHENTICATED" in refusals[0].message
    assert "P2P token" in refusals[0].message


async def test_the_token_stays_out_of_reprs_and_logs(
    registry: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    directory = RegistryDirectory(registry, token=P2P)
    assert P2P not in repr(directory)
    wrong = _publisher(registry, "wrong-token-0123456789abcdef", interval_s=0.2)
    wrong.start()
    try:
        await asyncio.to_thread(wait_until, lambda: wrong.failures >= 1, 30, "failure")
    finally:
        await asyncio.to_thread(wrong.stop)
    assert "wrong-token" not in caplog.text
    assert P2P not in caplog.text
