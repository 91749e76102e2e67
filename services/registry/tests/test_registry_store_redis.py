"""The Redis stores on the real Redis: the contract suite, the key layout, and races."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from flexinfer_common.errors import InvalidSpecError, StoreError
from flexinfer_registry.adapters.stores import create_stores
from flexinfer_registry.adapters.stores.redis import RedisModelStore, RedisSourceStore
from flexinfer_registry.adapters.stores.rfc3339 import parse_ts
from flexinfer_registry.core.records import ModelStatus, Provider, SourceQuery, SourceStatus
from flexinfer_registry.core.store import ModelRegistryStore, SourceStore, Stores
from flexinfer_registry.settings import RegistrySettings
from flexinfer_registry.testing.replicas import check_exactly_once, check_whole_records
from flexinfer_registry.testing.store_contract import (
    MODEL_STORE_CHECKS,
    SOURCE_STORE_CHECKS,
    T0,
    ModelStoreCheck,
    SourceStoreCheck,
    source,
)
from flexinfer_testing.services import redis_prefix, require_redis


@pytest.fixture
async def prefix() -> AsyncIterator[str]:
    """A key prefix of this test's own; its keys are deleted afterwards."""
    async with redis_prefix("mx:") as value:
        yield value


@pytest.fixture
def raw_redis() -> aioredis.Redis:
    """A plain client for looking at the keys a store wrote (closed by the test)."""
    return aioredis.Redis.from_url(require_redis(), decode_responses=True)


@pytest.mark.parametrize("check", MODEL_STORE_CHECKS, ids=lambda c: c.__name__)
async def test_redis_model_store_contract(check: ModelStoreCheck, prefix: str) -> None:
    async def open_store() -> ModelRegistryStore:
        return RedisModelStore.from_url(require_redis(), prefix)

    await check(open_store)


@pytest.mark.parametrize("check", SOURCE_STORE_CHECKS, ids=lambda c: c.__name__)
async def test_redis_source_store_contract(check: SourceStoreCheck, prefix: str) -> None:
    async def open_store() -> SourceStore:
        return RedisSourceStore.from_url(require_redis(), prefix)

    await check(open_store)


async def test_model_hash_has_the_modelexpress_layout(
    prefix: str, raw_redis: aioredis.Redis
) -> None:
    store = RedisModelStore.from_url(require_redis(), prefix)
    try:
        assert await store.try_claim("Qwen/Qwen2.5-0.5B", Provider.HUGGING_FACE, now=T0)
        fields = await raw_redis.hgetall(f"{prefix}model:Qwen/Qwen2.5-0.5B")
        assert fields.keys() == {"provider", "status", "created_at", "last_used_at", "updated_at"}
        assert fields["status"] == "DOWNLOADING"
        assert fields["provider"] == "HUGGING_FACE"
        assert str(fields["created_at"]).endswith("Z")
        assert parse_ts(str(fields["created_at"])) == T0
        await store.set_status(
            "Qwen/Qwen2.5-0.5B", Provider.HUGGING_FACE, ModelStatus.ERROR, "x", now=T0 + 1
        )
        assert (await raw_redis.hget(f"{prefix}model:Qwen/Qwen2.5-0.5B", "message")) == "x"
    finally:
        await store.close()
        await raw_redis.aclose()


async def test_source_keys_have_the_modelexpress_layout(
    prefix: str, raw_redis: aioredis.Redis
) -> None:
    store = RedisSourceStore.from_url(require_redis(), prefix)
    try:
        record = source("worker-0")
        await store.publish(record)
        index = await raw_redis.hgetall(f"{prefix}source:{record.mx_source_id}")
        assert set(index) == {"__attributes__", "worker-0"}
        assert '"model_name": "Qwen/Qwen2.5-0.5B"' in index["__attributes__"]
        worker = await raw_redis.hget(f"{prefix}source:{record.mx_source_id}:worker-0", "status")
        assert worker == "READY"
        # GC of the last worker removes the index too: nothing is left behind.
        assert await store.mark_stale(90, now=T0 + 100) == 1
        assert await store.gc(3600, now=T0 + 4000) == 1
        assert [k async for k in raw_redis.scan_iter(match=f"{prefix}*")] == []
    finally:
        await store.close()
        await raw_redis.aclose()


async def test_reserved_and_ambiguous_source_ids_are_refused(prefix: str) -> None:
    store = RedisSourceStore.from_url(require_redis(), prefix)
    try:
        with pytest.raises(InvalidSpecError):
            await store.publish(source("__attributes__"))
        with pytest.raises(InvalidSpecError):
            await store.publish(source("w", mx_source_id="ab:cd"))
        assert await store.get("ab:cd", "w") is None
        assert await store.list(SourceQuery(mx_source_id="ab:cd")) == []
    finally:
        await store.close()


async def test_set_status_never_leaves_a_partial_hash(prefix: str) -> None:
    writer = RedisModelStore.from_url(require_redis(), prefix)
    await check_whole_records(writer, RedisModelStore.from_url(require_redis(), prefix), writes=200)


async def test_crash_between_claim_and_completion_leaves_no_success(prefix: str) -> None:
    """A claimer that dies leaves DOWNLOADING; only a stale takeover can finish the model."""
    crashed = RedisModelStore.from_url(require_redis(), prefix)
    assert await crashed.try_claim("m", Provider.S3, now=T0)
    await crashed.close()  # the process is gone: no set_status(DOWNLOADED) ever comes
    survivor = RedisModelStore.from_url(require_redis(), prefix)
    try:
        record = await survivor.get("m")
        assert record is not None
        assert record.status == ModelStatus.DOWNLOADING
        assert (await survivor.status_counts()).get(ModelStatus.DOWNLOADED) is None
        assert not await survivor.try_claim("m", Provider.S3, now=T0 + 10, stale_after=60)
        assert await survivor.try_claim("m", Provider.S3, now=T0 + 61, stale_after=60)
    finally:
        await survivor.close()


async def test_unreachable_redis_is_a_store_error() -> None:
    settings = RegistrySettings(store="redis", redis_url="redis://127.0.0.1:1/0")
    with pytest.raises(StoreError, match="redis ping failed"):
        await create_stores(settings)
    store = RedisModelStore.from_url("redis://127.0.0.1:1/0")
    try:
        with pytest.raises(StoreError):
            await store.get("m")
    finally:
        await store.close()


async def test_create_stores_by_name(prefix: str) -> None:
    stores = await create_stores(RegistrySettings(store="redis", redis_url=require_redis()))
    try:
        assert isinstance(stores.models, RedisModelStore)
        assert isinstance(stores.sources, RedisSourceStore)
        assert stores.models.key("a/b") == "mx:model:a/b"
        assert await stores.models.get(f"{prefix}never-written") is None
    finally:
        await stores.close()


async def test_redis_prefix_setting_keeps_stacks_apart(
    prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FLEXINFER_REGISTRY_REDIS_PREFIX reaches both stores; another prefix sees nothing."""
    monkeypatch.setenv("FLEXINFER_REGISTRY_REDIS_PREFIX", prefix)
    settings = RegistrySettings(store="redis", redis_url=require_redis())
    assert settings.redis_prefix == prefix
    ours = await create_stores(settings)
    other = await create_stores(settings.model_copy(update={"redis_prefix": prefix + "x:"}))
    try:
        assert isinstance(ours.models, RedisModelStore)
        assert ours.models.key("a/b") == f"{prefix}model:a/b"
        assert isinstance(ours.sources, RedisSourceStore)
        assert ours.sources.index_key("s") == f"{prefix}source:s"
        await ours.models.set_status("a/b", Provider.S3, ModelStatus.DOWNLOADED, None, now=T0)
        assert await other.models.get("a/b") is None
        assert await other.models.list_by_last_used() == []
        record = await ours.models.get("a/b")
        assert record is not None
        assert record.status == ModelStatus.DOWNLOADED
    finally:
        await ours.close()
        await other.close()


async def test_malformed_record_is_skipped_in_listings(
    prefix: str, raw_redis: aioredis.Redis
) -> None:
    store = RedisModelStore.from_url(require_redis(), prefix)
    try:
        await store.set_status("good", Provider.S3, ModelStatus.DOWNLOADED, None, now=T0)
        await raw_redis.hset(f"{prefix}model:bad", mapping={"status": "WEIRD"})
        assert [r.name for r in await store.list_by_last_used()] == ["good"]
        assert await store.status_counts() == {ModelStatus.DOWNLOADED: 1}
        with pytest.raises(StoreError, match="malformed"):
            await store.get("bad")
    finally:
        await store.close()
        await raw_redis.aclose()


async def test_stale_marking_spares_a_worker_that_heartbeats(prefix: str) -> None:
    store = RedisSourceStore.from_url(require_redis(), prefix)
    try:
        await store.publish(source("w", updated_at=T0))
        # The heartbeat lands before the reaper's script runs: it must not be marked.
        assert await store.update_status(
            source("w").mx_source_id, "w", SourceStatus.READY, None, now=T0 + 95
        )
        assert await store.mark_stale(90, now=T0 + 100) == 0
    finally:
        await store.close()


@pytest.mark.parametrize("missing_files", [False, True], ids=["fresh", "missing-files"])
async def test_redis_exactly_once_across_two_replicas(
    prefix: str, tmp_path: Path, missing_files: bool
) -> None:
    """100 EnsureModelDownloaded calls over two registry apps sharing one Redis: one download."""
    url = require_redis()
    stores = Stores(
        models=RedisModelStore.from_url(url, prefix), sources=RedisSourceStore.from_url(url, prefix)
    )
    try:
        await check_exactly_once(stores, tmp_path / "cache", missing_files=missing_files)
    finally:
        await stores.close()
