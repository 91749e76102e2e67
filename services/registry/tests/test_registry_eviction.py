"""LRU eviction (threshold, max_models, never in use) and the REST admin API."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import grpc
import httpx
import modelexpress.model_pb2 as mx_model
import modelexpress.model_pb2_grpc as mx_model_grpc
import modelexpress.p2p_pb2 as mx_p2p
import modelexpress.p2p_pb2_grpc as mx_p2p_grpc

from flexinfer_common.serving import serve_in_background
from flexinfer_registry.adapters.stores.memory import MemoryModelStore
from flexinfer_registry.app import create_app
from flexinfer_registry.core.cache import ModelCache
from flexinfer_registry.core.context import CacheContext
from flexinfer_registry.core.downloads import DownloadRequest, DownloadTracker, TrackerTiming
from flexinfer_registry.core.eviction import EvictionPolicy, ModelRemover
from flexinfer_registry.core.inuse import InUse
from flexinfer_registry.core.metrics import RegistryMetrics
from flexinfer_registry.core.records import ModelStatus
from flexinfer_registry.settings import RegistrySettings
from flexinfer_registry.testing.fakes import OneProvider, ScriptedProvider
from flexinfer_testing.scrape import (
    check_conventions,
    check_families,
    sample_value,
    wait_for_sample,
)

DAY = 24 * 3600.0
REGISTRY_FAMILIES: dict[str, set[str]] = {
    name: set()
    for name in (
        "flexinfer_registry_downloads_started",
        "flexinfer_registry_downloads_completed",
        "flexinfer_registry_downloads_failed",
        "flexinfer_registry_downloaded_bytes",
        "flexinfer_registry_streamed_bytes",
        "flexinfer_registry_cache_hits",
        "flexinfer_registry_cache_misses",
        "flexinfer_registry_evictions",
        "flexinfer_registry_active_sources",
    )
} | {"flexinfer_registry_sources": {"status"}}


class Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


async def test_lru_eviction(tmp_path: Path) -> None:
    clock, store, in_use = Clock(), MemoryModelStore(), InUse()
    context = CacheContext(store, ModelCache(tmp_path), in_use, RegistryMetrics(), clock)
    tracker = DownloadTracker(
        context, OneProvider(ScriptedProvider({"a": b"a"})), timing=TrackerTiming(poll_s=0.01)
    )
    for name in ("m1", "m2", "m3", "m4"):
        _ = [u async for u in tracker.ensure(DownloadRequest(name))]
        clock.now += DAY
    remover = ModelRemover(context)
    clock.now += 4 * DAY  # m1 is 8 days unused, m2 7 days, m3 6, m4 5
    with in_use.using("m1"):
        assert await remover.evict_once(EvictionPolicy(unused_threshold_s=7 * DAY - 1)) == ["m2"]
    assert await remover.evict_once(EvictionPolicy(unused_threshold_s=7 * DAY - 1)) == ["m1"]
    await store.set_status("m5", 0, ModelStatus.DOWNLOADING, None, now=0)  # type: ignore[arg-type]
    assert await remover.evict_once(EvictionPolicy(max_models=1)) == ["m3"]
    assert {r.name for r in await store.list_by_last_used()} == {"m4", "m5"}
    assert context.cache.load("m3") is None
    assert context.cache.load("m4") is not None


async def test_rest_admin_api(tmp_path: Path) -> None:
    settings = RegistrySettings(
        port=0,
        grpc_port=0,
        cache_dir=tmp_path,
        auth_token="tok",  # type: ignore[arg-type]
        reaper_interval_s=0.05,  # the sources-by-status gauge is the reaper's count
    )
    app: Any = create_app(settings, providers=OneProvider(ScriptedProvider({"a.json": b"{}"})))
    auth = (("authorization", "Bearer tok"),)
    async with (
        serve_in_background(app) as url,
        grpc.aio.insecure_channel(app.state.grpc_address) as ch,
    ):
        models = mx_model_grpc.ModelServiceStub(ch)
        for name in ("org/a", "org/b"):
            request = mx_model.ModelDownloadRequest(model_name=name)
            _ = [u async for u in models.EnsureModelDownloaded(request, metadata=auth)]
        again = mx_model.ModelDownloadRequest(model_name="org/a")  # cached now: a hit
        _ = [u async for u in models.EnsureModelDownloaded(again, metadata=auth)]
        files = mx_model.ModelFilesRequest(model_name="org/a")
        _ = [c async for c in models.StreamModelFiles(files, metadata=auth)]
        p2p = mx_p2p_grpc.P2pServiceStub(ch)
        worker = mx_p2p.WorkerMetadata(worker_rank=0, status=mx_p2p.SOURCE_STATUS_READY)
        identity = mx_p2p.SourceIdentity(model_name="org/a")
        await p2p.PublishMetadata(
            mx_p2p.PublishMetadataRequest(identity=identity, worker=worker, worker_id="w"),
            metadata=auth,
        )
        headers = {"authorization": "Bearer tok"}
        async with httpx.AsyncClient(base_url=url, headers=headers) as client:
            assert (
                await client.get("/v1/registry/models", headers={"authorization": ""})
            ).status_code == 401
            listed = (await client.get("/v1/registry/models")).json()
            assert [m["key"] for m in listed] == ["org/b", "org/a"]  # least recently used first
            described = (await client.get("/v1/registry/models/org/a")).json()
            assert described["files"] == [{"path": "a.json", "size": 2}]
            assert (await client.get("/v1/registry/models/org/zz")).status_code == 404
            assert (await client.post("/v1/registry/models/org/a/evict")).status_code == 200
            assert (await client.delete("/v1/registry/models/org/b")).status_code == 200
            assert (await client.get("/v1/registry/models")).json() == []
            status = (await client.get("/v1/registry/status")).json()
            assert status == {"models": {}, "ready_sources": 1}
            sources = (await client.get("/v1/registry/sources?status=ready")).json()
            assert [s["worker_id"] for s in sources] == ["w"]
            assert (await client.get("/v1/registry/sources?status=bogus")).status_code == 400
            assert (await client.post("/v1/registry/evict")).json() == {"evicted": []}
            sources = "flexinfer_registry_sources"
            families = await wait_for_sample(client, sources, 1, status="READY")
            check_families(families, REGISTRY_FAMILIES)
            check_conventions(families)
            assert sample_value(families, "flexinfer_registry_downloads_started_total") == 2
            assert sample_value(families, "flexinfer_registry_downloads_completed_total") == 2
            assert sample_value(families, "flexinfer_registry_cache_misses_total") == 2
            assert sample_value(families, "flexinfer_registry_cache_hits_total") == 1
            # a.json's two bytes in, then out again by StreamModelFiles.
            assert sample_value(families, "flexinfer_registry_downloaded_bytes_total") == 4
            assert sample_value(families, "flexinfer_registry_streamed_bytes_total") == 2
            assert sample_value(families, "flexinfer_registry_evictions_total") == 1
            assert (await client.get("/openapi.json")).status_code == 200
