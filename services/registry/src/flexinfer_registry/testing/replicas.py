"""Two registry replicas sharing one store: the exactly-once check, reusable per backend.

``await check_exactly_once(stores, cache_dir)`` starts two registry apps on free ports that
share ``stores`` (any backend: memory, Redis, ...) and one cache folder, sends 100
concurrent EnsureModelDownloaded calls through modelexpress's own stubs spread over both,
and asserts one download happened and every caller saw the same progress and final status.
"""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import grpc

from flexinfer_common.serving import serve_in_background
from flexinfer_registry._generated.model_express import model_pb2, model_pb2_grpc
from flexinfer_registry.app import create_app
from flexinfer_registry.core.store import Stores
from flexinfer_registry.settings import RegistrySettings
from flexinfer_registry.testing.fakes import COMMIT, OneProvider, ScriptedProvider

CALLS = 100


async def check_exactly_once(stores: Stores, cache_dir: Path, model: str = "race/model") -> None:
    """See the module docstring."""
    gate = asyncio.Event()
    provider = ScriptedProvider({"config.json": b"{}", "w.safetensors": b"x" * 4096}, gate=gate)
    settings = RegistrySettings(
        port=0,
        grpc_port=0,
        cache_dir=cache_dir,
        download_heartbeat_s=0.02,
        download_poll_s=0.01,
        eviction_enabled=False,
    )
    async with AsyncExitStack() as stack:
        addresses = []
        for _ in range(2):
            app: Any = create_app(settings, stores=stores, providers=OneProvider(provider))
            await stack.enter_async_context(serve_in_background(app))
            addresses.append(str(app.state.grpc_address))
        channels = [
            await stack.enter_async_context(grpc.aio.insecure_channel(a)) for a in addresses
        ]
        stubs = [model_pb2_grpc.ModelServiceStub(c) for c in channels]  # type: ignore[no-untyped-call]

        async def ensure(i: int) -> list[Any]:
            request = model_pb2.ModelDownloadRequest(model_name=model)
            return [u async for u in stubs[i % 2].EnsureModelDownloaded(request)]

        calls = [asyncio.create_task(ensure(i)) for i in range(CALLS)]
        await asyncio.wait_for(provider.started.wait(), 10)
        await asyncio.sleep(0.2)  # every caller is now waiting on the one download
        gate.set()
        results = await asyncio.wait_for(asyncio.gather(*calls), 30)
    assert provider.downloads == 1, f"{provider.downloads} downloads started"
    finals = {(r[-1].status, r[-1].resolved_revision) for r in results}
    assert finals == {(model_pb2.DOWNLOADED, COMMIT)}
    # Progress: callers on both replicas saw the winner's byte counts while waiting.
    progress = [u.message for r in results for u in r if u.status == model_pb2.DOWNLOADING]
    assert any("downloading:" in (m or "") for m in progress)
    record = await stores.models.get(model)
    assert record is not None
    assert record.status.name == "DOWNLOADED"
