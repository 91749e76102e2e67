"""Warm starts through a registry started with tokens, as compose runs it: real engine
processes, a real registry with an admin and a P2P token, NIXL over UCX. Replica 1 (token
from a mounted file) publishes with the P2P token, replica 2 (token in its environment)
lists it and READs every tensor from it; an engine without a token loads files, and its log
names the UNAUTHENTICATED refusal, of the pull and of its publication, without a storm."""

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
from pydantic import SecretStr

from flexinfer_common.serving import serve_in_background
from flexinfer_engine.core.weights import generate_model
from flexinfer_registry.app import create_app as create_registry
from flexinfer_registry.settings import RegistrySettings
from flexinfer_testing.clients import wait_until
from flexinfer_testing.engines import Process, reference_engine

NAME = "p2p-auth-tiny"
ADMIN = "admin-token-0123456789abcdef"
P2P = "p2p-token-0123456789abcdef"


@pytest.fixture
async def registry(tmp_path: Path) -> AsyncIterator[str]:
    """A registry that refuses every call without one of its two tokens."""
    settings = RegistrySettings(
        port=0,
        grpc_port=0,
        cache_dir=tmp_path / "reg",
        auth_token=SecretStr(ADMIN),
        p2p_token=SecretStr(P2P),
    )
    app: Any = create_registry(settings)
    async with serve_in_background(app):
        yield str(app.state.grpc_address)


def _ready_workers(registry: str) -> list[str]:
    request = mx_p2p.ListSourcesRequest(
        model_name_filter=NAME, status_filter=mx_p2p.SOURCE_STATUS_READY
    )
    with grpc.insecure_channel(registry) as channel:
        reply = mx_p2p_grpc.P2pServiceStub(channel).ListSources(
            request, timeout=10, metadata=(("authorization", f"Bearer {P2P}"),)
        )
    return [ref.worker_id for ref in reply.instances]


def _env(registry: str, worker_id: str, **extra: str) -> dict[str, str]:
    return {
        "FLEXINFER_ENGINE_REGISTRY": registry,
        "FLEXINFER_ENGINE_P2P_SOURCE": "1",
        "FLEXINFER_ENGINE_WORKER_ID": worker_id,
        # Refused publications retry once per heartbeat interval: a short one lets the
        # log show several windows within the test.
        "FLEXINFER_TRANSFER_SOURCE_HEARTBEAT_INTERVAL_S": "1",
        **extra,
    }


def _weights(url: str) -> dict[str, Any]:
    body: dict[str, Any] = httpx.get(f"{url}/healthz", timeout=10).json()
    return dict(body["weights"])


async def test_replicas_warm_start_with_the_p2p_token_and_without_it_load_files(
    registry: str, tmp_path: Path
) -> None:
    model_dir = generate_model(tmp_path / "cache" / "default_tiny", name=NAME, preset="tiny")
    token_file = tmp_path / "registry-token"
    token_file.write_text(f"{P2P}\n")
    token_file.chmod(0o600)
    await asyncio.to_thread(_replicas, registry, model_dir, token_file, tmp_path)


def _replicas(registry: str, model_dir: Path, token_file: Path, tmp_path: Path) -> None:
    from_file = {"FLEXINFER_ENGINE_REGISTRY_TOKEN_FILE": str(token_file)}
    with reference_engine(
        model_dir, tmp_path / "r1.log", name=NAME, env=_env(registry, "replica-1", **from_file)
    ) as one:
        wait_until(lambda: _ready_workers(registry), 60, "replica 1 READY")
        in_env = {"FLEXINFER_ENGINE_REGISTRY_TOKEN": P2P}
        with reference_engine(
            model_dir, tmp_path / "r2.log", name=NAME, env=_env(registry, "replica-2", **in_env)
        ) as two:
            second = _weights(two.url)
            assert second["strategy"] == "rdma", two.log_tail()
            assert second["source"].endswith("/replica-1")
            wait_until(lambda: len(_ready_workers(registry)) == 2, 60, "replica 2 READY")
        with reference_engine(
            model_dir, tmp_path / "r3.log", name=NAME, env=_env(registry, "no-token")
        ) as three:
            _check_refused(three)
        assert P2P not in one.log.read_text()


def _check_refused(engine: Process) -> None:
    """Files, and a log that says why: the pull's refusal and the publisher's, each once
    per attempt, never the token."""
    weights = _weights(engine.url)
    assert weights["strategy"] in ("gds", "default"), engine.log_tail()
    text = engine.log.read_text()
    (pull,) = [line for line in text.splitlines() if "load strategy rdma failed" in line]
    assert "RegistryAuthError" in pull
    assert "refused ListSources (no token): UNAUTHENTICATED" in pull
    wait_until(lambda: _refusals(engine) >= 2, 30, "two refused publications")
    # One per 1 s heartbeat interval; retry_s doubling from 1 s would look the same here,
    # but a storm (a retry per millisecond) would not.
    assert _refusals(engine) < 30
    assert P2P not in engine.log.read_text()


def _refusals(engine: Process) -> int:
    lines = engine.log.read_text().splitlines()
    return sum("refused to let no-token publish (UNAUTHENTICATED" in line for line in lines)
