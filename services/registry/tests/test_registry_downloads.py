"""Exactly-once downloads, missing-file re-claims, crashes and failures."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from flexinfer_registry.adapters.stores.memory import MemoryModelStore, MemorySourceStore
from flexinfer_registry.core.cache import ModelCache
from flexinfer_registry.core.context import CacheContext
from flexinfer_registry.core.download_status import StatusUpdate
from flexinfer_registry.core.downloads import (
    DownloadRequest,
    DownloadTracker,
    TrackerTiming,
)
from flexinfer_registry.core.records import ModelStatus, Provider
from flexinfer_registry.core.store import ModelRegistryStore, Stores
from flexinfer_registry.testing.fakes import COMMIT, OneProvider, ScriptedProvider
from flexinfer_registry.testing.replicas import check_exactly_once

FILES = {"config.json": b"{}", "model.safetensors": b"w" * 1000}
FAST = TrackerTiming(heartbeat_s=0.01, stale_s=60.0, poll_s=0.01)


async def memory_stores() -> Stores:
    return Stores(models=MemoryModelStore(), sources=MemorySourceStore())


STORE_FACTORIES: dict[str, Callable[[], Awaitable[Stores]]] = {"memory": memory_stores}


@pytest.mark.parametrize("missing_files", [False, True], ids=["fresh", "missing-files"])
@pytest.mark.parametrize("backend", sorted(STORE_FACTORIES))
async def test_exactly_once_across_two_replicas(
    backend: str, tmp_path: Path, missing_files: bool
) -> None:
    stores = await STORE_FACTORIES[backend]()
    try:
        await check_exactly_once(stores, tmp_path / "cache", missing_files=missing_files)
    finally:
        await stores.close()


class Clock:
    """A settable clock."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def store() -> AsyncIterator[ModelRegistryStore]:
    s = MemoryModelStore()
    yield s
    await s.close()


def tracker(
    store: ModelRegistryStore, cache: Path, provider: ScriptedProvider, clock: Clock | None = None
) -> DownloadTracker:
    context = CacheContext(store, ModelCache(cache), clock=clock or time.time)
    return DownloadTracker(context, OneProvider(provider), timing=FAST)


async def run(t: DownloadTracker, name: str = "org/m", **kw: object) -> list[StatusUpdate]:
    return [u async for u in t.ensure(DownloadRequest(name, **kw))]  # type: ignore[arg-type]


class Watched:
    """One ensure running in a task; ``waiting`` is set by its first DOWNLOADING update,
    i.e. once the tracker has seen another's claim and decided to wait on it."""

    def __init__(self, t: DownloadTracker, name: str = "org/m") -> None:
        self.updates: list[StatusUpdate] = []
        self.waiting = asyncio.Event()
        self.task = asyncio.create_task(self._run(t, name))

    async def _run(self, t: DownloadTracker, name: str) -> list[StatusUpdate]:
        async for update in t.ensure(DownloadRequest(name)):
            self.updates.append(update)
            if update.status == ModelStatus.DOWNLOADING:
                self.waiting.set()
        return self.updates


async def test_missing_files_are_downloaded_again(
    store: ModelRegistryStore, tmp_path: Path
) -> None:
    provider = ScriptedProvider(FILES)
    t = tracker(store, tmp_path, provider)
    assert (await run(t))[-1].status == ModelStatus.DOWNLOADED
    model = t.cache.load("org/m")
    assert model is not None
    (model.files_dir / "model.safetensors").unlink()
    updates = await run(t)
    assert updates[-1].status == ModelStatus.DOWNLOADED
    assert provider.downloads == 2
    assert t.cache.load("org/m") is not None
    # A truncated file is as good as missing: never a false hit.
    (model.files_dir / "config.json").write_bytes(b"{")
    assert (await run(t))[-1].status == ModelStatus.DOWNLOADED
    assert provider.downloads == 3


async def test_weight_mode_and_revision_are_separate_entries(
    store: ModelRegistryStore, tmp_path: Path
) -> None:
    provider = ScriptedProvider(FILES)
    t = tracker(store, tmp_path, provider)
    await run(t, ignore_weights=True)
    light = t.cache.load("org/m#no-weights")
    assert light is not None
    assert [f.path for f in light.files] == ["config.json"]
    await run(t)
    await run(t, revision="v2")
    assert provider.downloads == 3
    assert {r.name for r in await store.list_by_last_used()} == {
        "org/m",
        "org/m#no-weights",
        "org/m@v2",
    }


async def test_crashed_download_is_reclaimed_after_timeout(
    store: ModelRegistryStore, tmp_path: Path
) -> None:
    clock = Clock()
    provider = ScriptedProvider(FILES)
    t = tracker(store, tmp_path, provider, clock)
    # A replica claimed the model, wrote half a file, and died: no ERROR, no heartbeat.
    assert await store.try_claim("org/m", Provider.HUGGING_FACE, now=clock.now - 30)
    staging = t.cache.staging("org/m")
    (staging / "files" / "model.safetensors").write_bytes(b"w" * 10)
    waiting = Watched(t)
    await asyncio.wait_for(waiting.waiting.wait(), 10)
    assert provider.downloads == 0  # the claim is still fresh: wait, never download twice
    assert t.cache.load("org/m") is None  # partial files are never served
    clock.now += 31  # now older than stale_s = 60
    updates = await asyncio.wait_for(waiting.task, 10)
    assert updates[-1].status == ModelStatus.DOWNLOADED
    assert provider.downloads == 1
    record = await store.get("org/m")
    assert record is not None
    assert record.status == ModelStatus.DOWNLOADED
    assert t.cache.clean_tmp(0, now=time.time() + 1) == 1  # the dead replica's leftovers


async def test_failure_reports_error_and_leaves_nothing(
    store: ModelRegistryStore, tmp_path: Path
) -> None:
    provider = ScriptedProvider(FILES, fail="cannot reach example.invalid: connection refused")
    t = tracker(store, tmp_path, provider)
    updates = await run(t)
    assert updates[-1].status == ModelStatus.ERROR
    assert "connection refused" in (updates[-1].message or "")
    record = await store.get("org/m")
    assert record is not None
    assert record.status == ModelStatus.ERROR
    assert t.cache.load("org/m") is None
    assert list((tmp_path / ".tmp").iterdir()) == []
    provider.fail = None  # the next request retries the ERROR record
    assert (await run(t))[-1].status == ModelStatus.DOWNLOADED
    assert provider.downloads == 2


async def test_waiters_on_another_replica_see_the_error(
    store: ModelRegistryStore, tmp_path: Path
) -> None:
    gate = asyncio.Event()
    provider = ScriptedProvider(FILES, gate=gate, fail="bucket not found")
    first, second = tracker(store, tmp_path, provider), tracker(store, tmp_path, provider)
    a = asyncio.create_task(run(first))
    await provider.started.wait()
    b = Watched(second)
    await asyncio.wait_for(b.waiting.wait(), 10)  # b follows a's claim, it has not claimed
    gate.set()
    for result in await asyncio.gather(a, b.task):
        assert result[-1].status == ModelStatus.ERROR
        assert result[-1].message == "bucket not found"
    assert provider.downloads == 1


async def test_shutdown_mid_download_releases_the_claim(
    store: ModelRegistryStore, tmp_path: Path
) -> None:
    provider = ScriptedProvider(FILES, gate=asyncio.Event())
    t = tracker(store, tmp_path, provider)
    waiting = asyncio.create_task(run(t))
    await provider.started.wait()
    await t.close()
    updates = await asyncio.wait_for(waiting, 5)
    assert updates[-1].status == ModelStatus.ERROR
    record = await store.get("org/m")
    assert record is not None
    assert record.status == ModelStatus.ERROR
    assert t.cache.load("org/m") is None


async def test_hit_reports_the_snapshot(store: ModelRegistryStore, tmp_path: Path) -> None:
    provider = ScriptedProvider(FILES, resolved_revision=None)
    t = tracker(store, tmp_path, provider)
    first = (await run(t))[-1]
    second = await run(t)
    assert len(second) == 1
    assert second[0].resolved_revision == first.resolved_revision
    assert first.resolved_revision is not None
    assert len(first.resolved_revision) == 40
    assert first.resolved_revision != COMMIT


class SlowHeartbeats(MemoryModelStore):
    """A store whose DOWNLOADING writes take 50 ms in a worker thread, as a SQL store's
    round trip does: a caller cancelled meanwhile does not stop the write from landing."""

    def __init__(self) -> None:
        super().__init__()
        self.in_flight: set[asyncio.Future[None]] = set()
        self.sending = asyncio.Event()

    async def set_status(
        self,
        name: str,
        provider: Provider,
        status: ModelStatus,
        message: str | None,
        *,
        now: float,
    ) -> None:
        if status != ModelStatus.DOWNLOADING:
            return await super().set_status(name, provider, status, message, now=now)
        loop = asyncio.get_running_loop()

        def slow_write() -> None:
            time.sleep(0.05)  # the store's latency (this stands for the network, not a wait)
            done = asyncio.run_coroutine_threadsafe(
                MemoryModelStore.set_status(self, name, provider, status, message, now=now), loop
            )
            done.result(5)

        write = asyncio.ensure_future(asyncio.to_thread(slow_write))
        self.in_flight.add(write)
        write.add_done_callback(self.in_flight.discard)
        self.sending.set()
        await asyncio.shield(write)  # cancelling the caller does not recall a sent write
        return None


async def test_a_heartbeat_never_lands_after_the_final_status(tmp_path: Path) -> None:
    """The final DOWNLOADED must stay the record's last word: a heartbeat cancelled with its
    write on the wire used to land after it and revive the claim as DOWNLOADING, which other
    replicas waited on for stale_s and then downloaded again (2 downloads, seen under load
    with PostgreSQL)."""
    store = SlowHeartbeats()
    gate = asyncio.Event()
    provider = ScriptedProvider(FILES, gate=gate)
    context = CacheContext(store, ModelCache(tmp_path))
    timing = TrackerTiming(heartbeat_s=0.001, stale_s=60.0, poll_s=0.01)
    t = DownloadTracker(context, OneProvider(provider), timing=timing)
    waiting = asyncio.create_task(run(t))
    await provider.started.wait()
    await asyncio.wait_for(store.sending.wait(), 10)  # a heartbeat write is on the wire
    gate.set()
    assert (await asyncio.wait_for(waiting, 10))[-1].status == ModelStatus.DOWNLOADED
    await asyncio.gather(*store.in_flight)  # every write that was sent has landed
    record = await store.get("org/m")
    assert record is not None
    assert record.status == ModelStatus.DOWNLOADED
