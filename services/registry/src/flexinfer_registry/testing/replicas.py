"""Two registry replicas sharing one store: the exactly-once check, reusable per backend.

``await check_exactly_once(stores, cache_dir)`` starts two registry apps on free ports that
share ``stores`` (any backend: memory, Redis, ...) and one cache folder, sends 100
concurrent EnsureModelDownloaded calls through modelexpress's own stubs spread over both,
and asserts one download happened and every caller saw the same progress and final status.

Left alone, one replica usually claims before the other even looks, and a claim that is not
atomic would pass unnoticed. So each replica sees the store through a gate that holds its
first lookup until both replicas have looked: both find no record, and both race to claim.

With ``missing_files=True`` the store starts with a DOWNLOADED record whose files are not on
disk: both replicas judge it missing, and the gate holds the second replica's reset until
the first has reset the record and claimed it again, the order in which a plain delete
would wipe out the new claim and start a second download.

``await check_whole_records(writer, reader)`` takes two handles onto one store: one flips a
record between ERROR and DOWNLOADED (deleting it now and then) while the other polls it,
and every read must be a whole, consistent record, never half of one write.
"""

from __future__ import annotations

import asyncio
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import grpc

from flexinfer_common.serving import serve_in_background
from flexinfer_registry._generated.model_express import model_pb2, model_pb2_grpc
from flexinfer_registry.app import create_app
from flexinfer_registry.core.records import ModelRecord, ModelStatus, Provider
from flexinfer_registry.core.store import ModelRegistryStore, Stores
from flexinfer_registry.settings import RegistrySettings
from flexinfer_registry.testing.fakes import COMMIT, OneProvider, ScriptedProvider
from flexinfer_registry.testing.store_contract import T0

CALLS = 100


class _RaceGate(ModelRegistryStore):
    """Delegates to ``inner``; the first ``get`` waits until every replica has made one.

    When ``claimed`` is given, replica 0 sets it on winning a claim and replica 1's resets
    (delete, delete_if) wait for it.
    """

    def __init__(
        self,
        inner: ModelRegistryStore,
        barrier: asyncio.Barrier,
        index: int = 0,
        claimed: asyncio.Event | None = None,
    ) -> None:
        self.inner = inner
        self.barrier = barrier
        self.first = True
        self.index = index
        self.claimed = claimed

    async def _reset_turn(self) -> None:
        if self.claimed is not None and self.index == 1:
            await asyncio.wait_for(self.claimed.wait(), 10)

    async def get(self, name: str) -> ModelRecord | None:
        record = await self.inner.get(name)
        if self.first:
            self.first = False
            await asyncio.wait_for(self.barrier.wait(), 10)
        return record

    async def try_claim(
        self, name: str, provider: Provider, *, now: float, stale_after: float | None = None
    ) -> bool:
        won = await self.inner.try_claim(name, provider, now=now, stale_after=stale_after)
        if won and self.claimed is not None and self.index == 0:
            self.claimed.set()
        return won

    async def set_status(
        self,
        name: str,
        provider: Provider,
        status: ModelStatus,
        message: str | None,
        *,
        now: float,
    ) -> None:
        await self.inner.set_status(name, provider, status, message, now=now)

    async def touch(self, name: str, *, now: float) -> bool:
        return await self.inner.touch(name, now=now)

    async def delete(self, name: str) -> bool:
        await self._reset_turn()
        return await self.inner.delete(name)

    async def delete_if(self, name: str, status: ModelStatus, updated_at: float) -> bool:
        await self._reset_turn()
        return await self.inner.delete_if(name, status, updated_at)

    async def list_by_last_used(self, limit: int | None = None) -> list[ModelRecord]:
        return await self.inner.list_by_last_used(limit)

    async def status_counts(self) -> dict[ModelStatus, int]:
        return await self.inner.status_counts()

    async def close(self) -> None:
        """The caller owns the inner store."""


async def check_exactly_once(
    stores: Stores, cache_dir: Path, model: str = "race/model", *, missing_files: bool = False
) -> None:
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
        barrier = asyncio.Barrier(2)
        claimed = None
        if missing_files:
            claimed = asyncio.Event()
            await stores.models.set_status(
                model, Provider.HUGGING_FACE, ModelStatus.DOWNLOADED, "cached", now=time.time()
            )
        for index in range(2):
            gate_store = _RaceGate(stores.models, barrier, index, claimed)
            gated = Stores(models=gate_store, sources=stores.sources)
            app: Any = create_app(settings, stores=gated, providers=OneProvider(provider))
            await stack.enter_async_context(serve_in_background(app))
            addresses.append(str(app.state.grpc_address))
        channels = [
            await stack.enter_async_context(grpc.aio.insecure_channel(a)) for a in addresses
        ]
        stubs = [model_pb2_grpc.ModelServiceStub(c) for c in channels]  # type: ignore[no-untyped-call]

        waiting: set[int] = set()  # callers that saw DOWNLOADING
        progressed: set[int] = set()  # replicas with a caller that saw the byte counts
        all_waiting = asyncio.Event()

        async def ensure(i: int) -> list[Any]:
            request = model_pb2.ModelDownloadRequest(model_name=model)
            updates = []
            async for update in stubs[i % 2].EnsureModelDownloaded(request):
                updates.append(update)
                if update.status == model_pb2.DOWNLOADING:
                    waiting.add(i)
                    if "downloading:" in update.message:
                        progressed.add(i % 2)
                if len(waiting) == CALLS and len(progressed) == 2:
                    all_waiting.set()
            return updates

        calls = [asyncio.create_task(ensure(i)) for i in range(CALLS)]
        # Open the gate only once every caller, on both replicas, is waiting on the one
        # download and has seen its progress: a fixed pause here failed on a busy machine.
        await asyncio.wait_for(all_waiting.wait(), 60)
        gate.set()
        results = await asyncio.wait_for(asyncio.gather(*calls), 90)
    assert provider.downloads == 1, f"{provider.downloads} downloads started"
    finals = {(r[-1].status, r[-1].resolved_revision) for r in results}
    assert finals == {(model_pb2.DOWNLOADED, COMMIT)}
    # Every caller waited (none arrived after the download), and callers on both replicas
    # saw the winner's byte counts while waiting.
    assert all(r[0].status == model_pb2.DOWNLOADING for r in results)
    assert progressed == {0, 1}
    record = await stores.models.get(model)
    assert record is not None
    assert record.status.name == "DOWNLOADED"


async def check_whole_records(
    writer: ModelRegistryStore, reader: ModelRegistryStore, *, writes: int = 60
) -> None:
    """See the module docstring; closes both handles."""
    stop = asyncio.Event()
    reads = 0

    async def write() -> None:
        for i in range(writes):
            status = (ModelStatus.ERROR, ModelStatus.DOWNLOADED)[i % 2]
            message = f"m{i}" if status == ModelStatus.ERROR else None
            await writer.set_status("m", Provider.S3, status, message, now=T0 + i)
            if i % 10 == 0:
                await writer.delete("m")
        stop.set()

    async def read() -> None:
        nonlocal reads
        while not stop.is_set():
            record = await reader.get("m")
            if record is not None:
                reads += 1
                # An ERROR always carries its message, a DOWNLOADED never one.
                assert (record.status == ModelStatus.ERROR) == (record.message is not None)
                assert record.created_at <= record.updated_at == record.last_used_at

    try:
        await asyncio.gather(write(), read(), read())
        assert reads > 0
    finally:
        await writer.close()
        await reader.close()
