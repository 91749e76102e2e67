"""Eviction by cache size and free disk space (``max_size_bytes``, ``min_free_space_bytes``).

The downloads, the cache folder and the stores are real; only the disk's capacity is
simulated (:class:`SmallDisk`), so a nearly full disk needs no full disk.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import grpc
import httpx
import modelexpress.model_pb2 as mx_model
import modelexpress.model_pb2_grpc as mx_model_grpc
import pytest
from prometheus_client import CollectorRegistry

from flexinfer_common.serving import serve_in_background
from flexinfer_registry.adapters.stores.memory import MemoryModelStore
from flexinfer_registry.adapters.stores.redis import RedisModelStore
from flexinfer_registry.app import create_app
from flexinfer_registry.core.cache import ModelCache
from flexinfer_registry.core.context import CacheContext
from flexinfer_registry.core.download_status import StatusUpdate
from flexinfer_registry.core.downloads import (
    AfterDownload,
    DownloadRequest,
    DownloadTracker,
    RoomCheck,
    TrackerTiming,
)
from flexinfer_registry.core.eviction import (
    EvictionPolicy,
    ModelRemover,
    free_bytes,
    human_bytes,
)
from flexinfer_registry.core.inuse import InUse
from flexinfer_registry.core.metrics import RegistryMetrics
from flexinfer_registry.core.providers.base import ModelProvider
from flexinfer_registry.core.records import ModelStatus, Provider
from flexinfer_registry.core.store import ModelRegistryStore
from flexinfer_registry.settings import RegistrySettings
from flexinfer_registry.testing.fakes import OneProvider, ScriptedProvider
from flexinfer_testing.services import redis_prefix, require_redis

DAY = 24 * 3600.0
NEVER = 3650 * DAY
"""An unused threshold no test reaches, so only the size rules evict."""


class Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


class SizedModels:
    """A provider per model, each writing one weights file of that model's size."""

    def __init__(self, sizes: dict[str, int]) -> None:
        self.providers = {
            name: ScriptedProvider({"model.safetensors": b"w" * size})
            for name, size in sizes.items()
        }

    def provider_for(self, model_name: str, provider_enum: int = 0) -> ModelProvider:
        return self.providers[model_name]


def tree_bytes(root: Path) -> int:
    return sum(
        os.lstat(os.path.join(d, n)).st_size for d, _s, names in os.walk(root) for n in names
    )


class SmallDisk:
    """A disk of ``capacity`` bytes holding only the cache: free = capacity - cache bytes."""

    def __init__(self, root: Path, capacity: int) -> None:
        self.root = root
        self.capacity = capacity
        self.asked: list[Path] = []

    def __call__(self, path: Path) -> int:
        self.asked.append(path)
        return self.capacity - tree_bytes(self.root)


@pytest.fixture(params=["memory", "redis"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[ModelRegistryStore]:
    """An empty model store: in memory, and on the real Redis under a prefix of its own."""
    if request.param == "memory":
        yield MemoryModelStore()
        return
    async with redis_prefix("mx:") as prefix:
        redis_store = RedisModelStore.from_url(require_redis(), prefix)
        try:
            yield redis_store
        finally:
            await redis_store.close()


class Cache:
    """A tracker and a remover over one store, cache folder, clock and disk."""

    def __init__(
        self,
        store: ModelRegistryStore,
        root: Path,
        sizes: dict[str, int],
        *,
        disk: SmallDisk | None = None,
        room: EvictionPolicy | None = None,
        settle: EvictionPolicy | None = None,
    ) -> None:
        self.store, self.clock, self.in_use = store, Clock(), InUse()
        self.cache = ModelCache(root)
        self.registry = CollectorRegistry()
        self.metrics = RegistryMetrics(self.registry)
        self.models = SizedModels(sizes)
        context = CacheContext(store, self.cache, self.in_use, self.metrics, self.clock)
        self.remover = ModelRemover(context, free_space=disk or free_bytes)
        make_room: RoomCheck | None = None
        if room is not None:
            make_room = partial(self.remover.make_room, room)
        after_download: AfterDownload | None = None
        if settle is not None:
            after_download = partial(self.remover.enforce_size, settle)
        self.tracker = DownloadTracker(
            context,
            self.models,
            timing=TrackerTiming(poll_s=0.01),
            make_room=make_room,
            after_download=after_download,
        )

    async def download(self, name: str) -> StatusUpdate:
        """Ensure ``name``, then let a day pass (so every model has its own last use)."""
        updates = [u async for u in self.tracker.ensure(DownloadRequest(name))]
        self.clock.now += DAY
        return updates[-1]

    def size(self, key: str) -> int:
        return self.cache.disk_size(key)

    def counter(self, name: str) -> float | None:
        return self.registry.get_sample_value(f"flexinfer_registry_{name}_total")

    async def keys(self) -> list[str]:
        return [r.name for r in await self.store.list_by_last_used()]


async def test_size_cap_evicts_least_recently_used_first(
    store: ModelRegistryStore, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    sizes = {"m1": 1000, "m2": 2000, "m3": 3000, "m4": 4000}
    c = Cache(store, tmp_path, sizes)
    old = c.clock.now - 30 * DAY
    await store.set_status("m0", Provider.HUGGING_FACE, ModelStatus.ERROR, "boom", now=old)
    for name in sizes:
        assert (await c.download(name)).status == ModelStatus.DOWNLOADED
    await store.set_status("m5", Provider.HUGGING_FACE, ModelStatus.DOWNLOADING, None, now=old)
    on_disk = {name: c.size(name) for name in sizes}
    assert on_disk["m1"] > 1000, "the manifest counts too"
    caplog.set_level(logging.INFO, logger="flexinfer_registry.core.eviction")

    with c.in_use.using("m1"):  # least recently used, but streaming: m2 goes instead
        fits_without_m2 = sum(on_disk.values()) - on_disk["m2"]
        policy = EvictionPolicy(unused_threshold_s=NEVER, max_size_bytes=fits_without_m2)
        assert await c.remover.evict_once(policy) == ["m2"]
        fits_m1_m4 = EvictionPolicy(max_size_bytes=on_disk["m1"] + on_disk["m4"])
        assert await c.remover.evict_once(fits_m1_m4) == ["m3"], "stops once under the cap"
    tight = EvictionPolicy(unused_threshold_s=NEVER, max_size_bytes=on_disk["m4"])
    assert await c.remover.evict_once(tight) == ["m1"], "first to go once no longer in use"
    with c.in_use.using("m4"):
        assert await c.remover.evict_once(EvictionPolicy(max_size_bytes=0)) == []
    assert "over max_size_bytes, and no model left may go (in use or not DOWNLOADED)" in caplog.text

    assert await c.keys() == ["m0", "m5", "m4"], "ERROR and DOWNLOADING records stay"
    assert c.cache.load("m4") is not None
    assert not c.cache.model_root("m1").exists()
    assert c.counter("evictions") == 3
    m2 = f"evicted m2 ({human_bytes(on_disk['m2'])}) by rule max_size_bytes: cache holds"
    assert m2 in caplog.text
    assert await c.remover.evict_once(EvictionPolicy(max_size_bytes=0)) == ["m4"]
    assert await c.remover.evict_once(EvictionPolicy(max_size_bytes=0)) == []


async def test_free_space_floor_evicts_until_enough_is_free(
    store: ModelRegistryStore, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    disk = SmallDisk(tmp_path, capacity=100_000)
    sizes = {"m1": 10_000, "m2": 20_000, "m3": 30_000}
    c = Cache(store, tmp_path, sizes, disk=disk)
    for name in sizes:
        await c.download(name)
    m1 = c.size("m1")
    free = disk(tmp_path)
    assert 35_000 < free < 40_000
    caplog.set_level(logging.INFO, logger="flexinfer_registry.core.eviction")

    enough = EvictionPolicy(unused_threshold_s=NEVER, min_free_space_bytes=free)
    assert await c.remover.evict_once(enough) == []
    policy = EvictionPolicy(unused_threshold_s=NEVER, min_free_space_bytes=free + 10_500)
    assert await c.remover.evict_once(policy) == ["m1", "m2"], "m1 alone frees too little"
    assert disk(tmp_path) >= free + 10_500
    assert await c.keys() == ["m3"]
    assert f"evicted m1 ({human_bytes(m1)}) by rule min_free_space_bytes" in caplog.text
    assert set(disk.asked) == {tmp_path}, "the cache folder's own filesystem is measured"


async def test_a_new_download_below_the_floor_evicts_first(
    store: ModelRegistryStore, tmp_path: Path
) -> None:
    disk = SmallDisk(tmp_path, capacity=70_000)
    floor = EvictionPolicy(unused_threshold_s=NEVER, min_free_space_bytes=35_000)
    sizes = {"old": 30_000, "busy": 30_000, "new": 5_000}
    c = Cache(store, tmp_path, sizes, disk=disk, room=floor)
    await c.download("old")
    assert disk(tmp_path) > 35_000
    await c.download("busy")  # more than 35,000 bytes free when it started: nothing evicted
    assert await c.keys() == ["old", "busy"]
    assert disk(tmp_path) < 35_000

    done = await c.download("new")
    assert done.status == ModelStatus.DOWNLOADED
    assert await c.keys() == ["busy", "new"], "the unused model made room"
    assert c.counter("evictions") == 1


async def test_a_new_download_that_cannot_make_room_fails_readably(
    store: ModelRegistryStore, tmp_path: Path
) -> None:
    disk = SmallDisk(tmp_path, capacity=50_000)
    floor = EvictionPolicy(unused_threshold_s=NEVER, min_free_space_bytes=25_000)
    c = Cache(store, tmp_path, {"busy": 30_000, "new": 5_000}, disk=disk, room=floor)
    await c.download("busy")

    with c.in_use.using("busy"):
        failed = await c.download("new")
    assert failed.status == ModelStatus.ERROR
    assert failed.message is not None
    assert failed.message.startswith("not enough free disk for a new download: 19.")
    assert "min_free_space_bytes is 24.4 KiB" in failed.message
    record = await store.get("new")
    assert record is not None
    assert record.status == ModelStatus.ERROR, "the claim is released"
    assert c.counter("downloads_failed") == 1
    assert c.models.providers["new"].downloads == 0
    assert not c.cache.tmp_dir.exists() or not any(c.cache.tmp_dir.iterdir())

    retried = await c.download("new")  # busy is no longer in use: it is evicted this time
    assert retried.status == ModelStatus.DOWNLOADED
    assert await c.keys() == ["new"]


async def test_a_failing_disk_check_refuses_the_download(tmp_path: Path) -> None:
    def broken(path: Path) -> int:
        raise OSError(5, "Input/output error")

    store = MemoryModelStore()
    c = Cache(store, tmp_path, {"m": 10}, room=EvictionPolicy(min_free_space_bytes=1))
    c.remover.free_space = broken
    failed = await c.download("m")
    assert failed.status == ModelStatus.ERROR
    assert failed.message == "could not make room in the cache: [Errno 5] Input/output error"
    record = await store.get("m")
    assert record is not None
    assert record.status == ModelStatus.ERROR


async def test_no_floor_means_no_disk_check(tmp_path: Path) -> None:
    disk = SmallDisk(tmp_path, capacity=0)
    room = EvictionPolicy(max_size_bytes=1)
    c = Cache(MemoryModelStore(), tmp_path, {"m": 10}, disk=disk, room=room)
    assert (await c.download("m")).status == ModelStatus.DOWNLOADED
    assert disk.asked == [], "only min_free_space_bytes holds a download back"


async def test_max_models_counts_models_in_use(store: ModelRegistryStore, tmp_path: Path) -> None:
    c = Cache(store, tmp_path, {"m1": 10, "m2": 10, "m3": 10})
    for name in ("m1", "m2", "m3"):
        await c.download(name)
    with c.in_use.using("m1"):
        assert await c.remover.evict_once(EvictionPolicy(max_models=2)) == ["m2"]
    assert await c.keys() == ["m1", "m3"]


async def test_each_download_enforces_the_size_cap(
    store: ModelRegistryStore, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    sizes = {"m1": 1000, "m2": 1000, "m3": 1000, "m4": 3000, "huge": 9000}
    cap = EvictionPolicy(max_size_bytes=3500, max_models=1, unused_threshold_s=1.0)
    c = Cache(store, tmp_path, sizes, settle=cap)
    for name in ("m1", "m2"):
        assert (await c.download(name)).status == ModelStatus.DOWNLOADED
    assert await c.keys() == ["m1", "m2"], "under the cap: the other rules wait for a pass"
    m1 = c.size("m1")

    with c.in_use.using("m1"):
        assert (await c.download("m3")).status == ModelStatus.DOWNLOADED
        assert await c.keys() == ["m1", "m3"], "m1 is in use: m2 goes instead"
    caplog.set_level(logging.INFO, logger="flexinfer_registry.core.eviction")
    assert (await c.download("m4")).status == ModelStatus.DOWNLOADED
    assert await c.keys() == ["m4"], "as many go as it takes, least recently used first"
    assert f"evicted m1 ({human_bytes(m1)}) by rule max_size_bytes" in caplog.text
    assert "no model left may go" not in caplog.text
    assert c.counter("evictions") == 3

    caplog.clear()

    assert (await c.download("huge")).status == ModelStatus.DOWNLOADED
    assert await c.keys() == ["huge"], "the new model stays even when it alone is too big"
    assert c.cache.load("huge") is not None
    assert "over max_size_bytes, and no model left may go" in caplog.text


async def test_a_failing_size_check_after_a_download_keeps_the_model(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = MemoryModelStore()
    c = Cache(store, tmp_path, {"m": 10}, settle=EvictionPolicy(max_size_bytes=1))

    async def broken(key: str) -> list[str]:
        raise OSError(5, "Input/output error")

    c.tracker.after_download = broken
    done = await c.download("m")
    assert done.status == ModelStatus.DOWNLOADED
    assert "m: enforcing the cache size after the download failed" in caplog.text
    assert await c.keys() == ["m"]


@asynccontextmanager
async def registry_after(
    tmp_path: Path, names: tuple[str, ...], **settings: Any
) -> AsyncIterator[httpx.AsyncClient]:
    """A registry app with a 15 KB cache cap that downloaded ``names`` (10,000 bytes each)
    over gRPC, one after the other; a client of its REST port."""
    config = RegistrySettings(
        port=0, grpc_port=0, cache_dir=tmp_path, cache_max_size_bytes=15_000, **settings
    )
    provider = ScriptedProvider({"model.safetensors": b"w" * 10_000})
    app: Any = create_app(config, providers=OneProvider(provider))
    async with (
        serve_in_background(app) as url,
        grpc.aio.insecure_channel(app.state.grpc_address) as channel,
        httpx.AsyncClient(base_url=url) as client,
    ):
        models = mx_model_grpc.ModelServiceStub(channel)
        for name in names:
            request = mx_model.ModelDownloadRequest(model_name=name)
            updates = [u async for u in models.EnsureModelDownloaded(request)]
            assert updates[-1].status == mx_model.DOWNLOADED
        yield client


async def cached_keys(client: httpx.AsyncClient) -> list[str]:
    return [m["key"] for m in (await client.get("/v1/registry/models")).json()]


async def test_admin_evict_applies_the_configured_size_cap(tmp_path: Path) -> None:
    # Eviction off, else the second download would already evict the first.
    names = ("org/a", "org/b")
    settings: dict[str, Any] = {"eviction_min_free_space_bytes": 1, "eviction_enabled": False}
    async with registry_after(tmp_path, names, **settings) as client:
        assert (await client.post("/v1/registry/evict")).json() == {"evicted": ["org/a"]}
        assert await cached_keys(client) == ["org/b"]
        metrics = (await client.get("/metrics")).text
        assert "flexinfer_registry_evictions_total 1.0" in metrics


async def test_a_download_through_the_app_enforces_the_size_cap(tmp_path: Path) -> None:
    async with registry_after(tmp_path, ("org/a", "org/b")) as client:
        assert await cached_keys(client) == ["org/b"]
        assert (await client.post("/v1/registry/evict")).json() == {"evicted": []}
