"""The contract every ModelRegistryStore and SourceStore implementation must pass.

Each check is a plain ``async def check_*(open_store) -> None``. ``open_store()`` returns a
new handle onto one backing store that is empty when the check starts (for a networked
backend: a fresh key prefix / schema / namespace per check); calling it twice gives two
handles that share data, as two registry replicas do. Checks close what they open.
Timestamps are whole milliseconds: a store must keep at least that precision.

Use from a test file::

    @pytest.mark.parametrize("check", MODEL_STORE_CHECKS, ids=lambda c: c.__name__)
    async def test_models(check: ModelStoreCheck) -> None:
        await check(my_open_model_store)
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from flexinfer_common.mx_identity import SourceIdentity
from flexinfer_registry.core.records import (
    ModelStatus,
    Provider,
    SourceQuery,
    SourceRecord,
    SourceStatus,
)
from flexinfer_registry.core.store import ModelRegistryStore, SourceStore

OpenModelStore = Callable[[], Awaitable[ModelRegistryStore]]
OpenSourceStore = Callable[[], Awaitable[SourceStore]]
ModelStoreCheck = Callable[[OpenModelStore], Awaitable[None]]
SourceStoreCheck = Callable[[OpenSourceStore], Awaitable[None]]

T0 = 1_700_000_000.0
NAMES = ("Qwen/Qwen2.5-0.5B", "s3://bucket/prefix/model", "default/tiny:v1", "modèle-ü")


@asynccontextmanager
async def _opened(
    open_store: Callable[[], Awaitable[ModelRegistryStore]],
) -> AsyncIterator[ModelRegistryStore]:
    store = await open_store()
    try:
        yield store
    finally:
        await store.close()


@asynccontextmanager
async def _opened_sources(open_store: OpenSourceStore) -> AsyncIterator[SourceStore]:
    store = await open_store()
    try:
        yield store
    finally:
        await store.close()


def _near(a: float, b: float) -> bool:
    return abs(a - b) < 1e-3


# ---------------------------------------------------------------- model records


async def check_get_missing(open_store: OpenModelStore) -> None:
    """An unknown name has no record; delete and touch report False and create nothing."""
    async with _opened(open_store) as store:
        assert await store.get("nope/model") is None
        assert await store.delete("nope/model") is False
        assert await store.touch("nope/model", now=T0) is False
        assert await store.get("nope/model") is None
        assert await store.list_by_last_used() == []
        assert sum((await store.status_counts()).values()) == 0


async def check_claim_creates_downloading(open_store: OpenModelStore) -> None:
    """The first claim creates a complete DOWNLOADING record."""
    async with _opened(open_store) as store:
        for name in NAMES:
            assert await store.try_claim(name, Provider.S3, now=T0) is True
            record = await store.get(name)
            assert record is not None
            assert record.name == name
            assert record.provider == Provider.S3
            assert record.status == ModelStatus.DOWNLOADING
            assert _near(record.created_at, T0)
            assert _near(record.last_used_at, T0)
            assert _near(record.updated_at, T0)
            assert record.message is None


async def check_claim_refused_when_held(open_store: OpenModelStore) -> None:
    """A live DOWNLOADING claim or a DOWNLOADED record is not claimable; nothing changes."""
    async with _opened(open_store) as store:
        assert await store.try_claim("m", Provider.HUGGING_FACE, now=T0)
        assert not await store.try_claim("m", Provider.NGC, now=T0 + 1)
        assert not await store.try_claim("m", Provider.NGC, now=T0 + 1, stale_after=10)
        record = await store.get("m")
        assert record is not None
        assert record.provider == Provider.HUGGING_FACE
        assert _near(record.updated_at, T0)
        await store.set_status("m", Provider.HUGGING_FACE, ModelStatus.DOWNLOADED, "ok", now=T0 + 2)
        assert not await store.try_claim("m", Provider.HUGGING_FACE, now=T0 + 10_000, stale_after=1)
        done = await store.get("m")
        assert done is not None
        assert done.status == ModelStatus.DOWNLOADED


async def check_claim_retries_error(open_store: OpenModelStore) -> None:
    """An ERROR record is reclaimed exactly once, keeping created_at and clearing message."""
    async with _opened(open_store) as store:
        await store.set_status("m", Provider.GCS, ModelStatus.ERROR, "boom", now=T0)
        assert await store.try_claim("m", Provider.GCS, now=T0 + 5)
        assert not await store.try_claim("m", Provider.GCS, now=T0 + 6)
        record = await store.get("m")
        assert record is not None
        assert record.status == ModelStatus.DOWNLOADING
        assert record.message is None
        assert _near(record.created_at, T0)
        assert _near(record.updated_at, T0 + 5)


async def check_claim_reclaims_stale_download(open_store: OpenModelStore) -> None:
    """A DOWNLOADING claim silent for longer than stale_after is reclaimed (crashed owner)."""
    async with _opened(open_store) as store:
        assert await store.try_claim("m", Provider.HUGGING_FACE, now=T0)
        assert not await store.try_claim("m", Provider.HUGGING_FACE, now=T0 + 30, stale_after=60)
        assert not await store.try_claim("m", Provider.HUGGING_FACE, now=T0 + 600)
        assert await store.try_claim("m", Provider.HUGGING_FACE, now=T0 + 61, stale_after=60)
        record = await store.get("m")
        assert record is not None
        assert _near(record.created_at, T0)
        assert _near(record.updated_at, T0 + 61)
        # A heartbeat (set_status DOWNLOADING) keeps the new owner's claim alive.
        await store.set_status(
            "m", Provider.HUGGING_FACE, ModelStatus.DOWNLOADING, "50%", now=T0 + 100
        )
        assert not await store.try_claim("m", Provider.HUGGING_FACE, now=T0 + 150, stale_after=60)


async def check_concurrent_claims_one_winner(open_store: OpenModelStore) -> None:
    """100 concurrent claims over two handles (two replicas): exactly one wins."""
    async with _opened(open_store) as first, _opened(open_store) as second:
        stores = (first, second)
        results = await asyncio.gather(
            *(
                stores[i % 2].try_claim("race/model", Provider.HUGGING_FACE, now=T0)
                for i in range(100)
            )
        )
        assert sum(results) == 1
        await first.set_status("race/model", Provider.HUGGING_FACE, ModelStatus.ERROR, "x", now=T0)
        retries = await asyncio.gather(
            *(
                stores[i % 2].try_claim("race/model", Provider.HUGGING_FACE, now=T0 + 1)
                for i in range(100)
            )
        )
        assert sum(retries) == 1


async def check_set_status_upserts(open_store: OpenModelStore) -> None:
    """set_status creates or updates, preserving created_at; messages round-trip."""
    async with _opened(open_store) as store:
        await store.set_status("m", Provider.NGC, ModelStatus.DOWNLOADING, None, now=T0)
        await store.set_status("m", Provider.NGC, ModelStatus.DOWNLOADED, 'done ✓ "q"', now=T0 + 3)
        record = await store.get("m")
        assert record is not None
        assert record.status == ModelStatus.DOWNLOADED
        assert record.message == 'done ✓ "q"'
        assert _near(record.created_at, T0)
        assert _near(record.last_used_at, T0 + 3)
        await store.set_status("m", Provider.NGC, ModelStatus.ERROR, None, now=T0 + 4)
        again = await store.get("m")
        assert again is not None
        assert again.message is None
        assert again.status == ModelStatus.ERROR


async def check_touch_updates_last_used_only(open_store: OpenModelStore) -> None:
    """touch moves last_used_at and nothing else."""
    async with _opened(open_store) as store:
        await store.set_status("m", Provider.S3, ModelStatus.DOWNLOADED, "ok", now=T0)
        assert await store.touch("m", now=T0 + 50)
        record = await store.get("m")
        assert record is not None
        assert _near(record.last_used_at, T0 + 50)
        assert _near(record.updated_at, T0)
        assert record.status == ModelStatus.DOWNLOADED
        assert record.message == "ok"


async def check_delete(open_store: OpenModelStore) -> None:
    """delete removes exactly one record, once."""
    async with _opened(open_store) as store:
        await store.set_status("a", Provider.S3, ModelStatus.DOWNLOADED, None, now=T0)
        await store.set_status("b", Provider.S3, ModelStatus.DOWNLOADED, None, now=T0)
        assert await store.delete("a") is True
        assert await store.delete("a") is False
        assert await store.get("a") is None
        assert await store.get("b") is not None


async def check_list_by_last_used(open_store: OpenModelStore) -> None:
    """Oldest last_used_at first, ties broken by name, cut to limit."""
    async with _opened(open_store) as store:
        for offset, name in ((30, "c"), (10, "b"), (20, "a"), (10, "a2")):
            await store.set_status(name, Provider.S3, ModelStatus.DOWNLOADED, None, now=T0 + offset)
        await store.touch("b", now=T0 + 40)
        names = [r.name for r in await store.list_by_last_used()]
        assert names == ["a2", "a", "c", "b"]
        assert [r.name for r in await store.list_by_last_used(2)] == ["a2", "a"]


async def check_status_counts(open_store: OpenModelStore) -> None:
    """Counts per status."""
    async with _opened(open_store) as store:
        await store.set_status("a", Provider.S3, ModelStatus.DOWNLOADED, None, now=T0)
        await store.set_status("b", Provider.S3, ModelStatus.DOWNLOADED, None, now=T0)
        await store.set_status("c", Provider.S3, ModelStatus.ERROR, "x", now=T0)
        assert await store.try_claim("d", Provider.S3, now=T0)
        counts = await store.status_counts()
        assert counts.get(ModelStatus.DOWNLOADED) == 2
        assert counts.get(ModelStatus.ERROR) == 1
        assert counts.get(ModelStatus.DOWNLOADING) == 1


async def check_delete_if_compares(open_store: OpenModelStore) -> None:
    """delete_if removes the record only while status and updated_at still match."""
    async with _opened(open_store) as store:
        assert await store.delete_if("m", ModelStatus.DOWNLOADED, T0) is False
        await store.set_status("m", Provider.S3, ModelStatus.DOWNLOADED, "ok", now=T0)
        await store.touch("m", now=T0 + 50)  # a use is not a change of what was judged
        assert await store.delete_if("m", ModelStatus.DOWNLOADING, T0) is False
        assert await store.delete_if("m", ModelStatus.DOWNLOADED, T0 + 0.01) is False
        assert await store.get("m") is not None
        assert await store.delete_if("m", ModelStatus.DOWNLOADED, T0) is True
        assert await store.get("m") is None
        assert await store.delete_if("m", ModelStatus.DOWNLOADED, T0) is False
        # Judged DOWNLOADED at T0, but re-claimed since: the new claim survives.
        await store.set_status("n", Provider.S3, ModelStatus.DOWNLOADED, "ok", now=T0)
        assert await store.delete("n")
        assert await store.try_claim("n", Provider.S3, now=T0 + 1)
        assert await store.delete_if("n", ModelStatus.DOWNLOADED, T0) is False
        record = await store.get("n")
        assert record is not None
        assert record.status == ModelStatus.DOWNLOADING


async def check_concurrent_delete_if_one_winner(open_store: OpenModelStore) -> None:
    """Replicas that judged one record concurrently: exactly one delete_if removes it."""
    stores = [await open_store() for _ in range(4)]
    try:
        await stores[0].set_status("m", Provider.S3, ModelStatus.DOWNLOADED, None, now=T0)
        results = await asyncio.gather(
            *(s.delete_if("m", ModelStatus.DOWNLOADED, T0) for s in stores for _ in range(3))
        )
        assert sum(results) == 1
        assert await stores[1].get("m") is None
    finally:
        for store in stores:
            await store.close()


async def check_close_idempotent(open_store: OpenModelStore) -> None:
    """close twice is harmless."""
    store = await open_store()
    await store.close()
    await store.close()


MODEL_STORE_CHECKS: tuple[ModelStoreCheck, ...] = (
    check_get_missing,
    check_claim_creates_downloading,
    check_claim_refused_when_held,
    check_claim_retries_error,
    check_claim_reclaims_stale_download,
    check_concurrent_claims_one_winner,
    check_set_status_upserts,
    check_touch_updates_last_used_only,
    check_delete,
    check_delete_if_compares,
    check_concurrent_delete_if_one_winner,
    check_list_by_last_used,
    check_status_counts,
    check_close_idempotent,
)

# ---------------------------------------------------------------- source records

IDENTITY = SourceIdentity(
    mx_version="0.7.0",
    mx_source_type=0,
    model_name="Qwen/Qwen2.5-0.5B",
    backend_framework=1,
    tensor_parallel_size=2,
    pipeline_parallel_size=1,
    expert_parallel_size=1,
    dtype="bfloat16",
    quantization="",
    extra_parameters={"Max-Len": "4096", "b": "ü"},
    revision="abc123",
    gpu_arch="sm_90",
)


def source(
    worker_id: str,
    *,
    mx_source_id: str = "0123456789abcdef",
    rank: int = 0,
    status: SourceStatus = SourceStatus.READY,
    updated_at: float = T0,
    identity: SourceIdentity = IDENTITY,
) -> SourceRecord:
    """A fully populated worker record for the checks."""
    return SourceRecord(
        mx_source_id=mx_source_id,
        worker_id=worker_id,
        identity=identity,
        worker_rank=rank,
        status=status,
        updated_at=updated_at,
        metadata=bytes(range(256)) + b"\x00tail",
        accelerator="cuda",
        topology={"node": "n1", "rack": "r2"},
        source_load=0.25,
        training_step=7,
        layout_signature="sig",
        pod_name="pod-0",
        pod_uid="uid-0",
        pod_namespace="ns",
    )


async def check_source_roundtrip(open_store: OpenSourceStore) -> None:
    """publish then get returns every field unchanged; unknown workers are None."""
    async with _opened_sources(open_store) as store:
        record = source("w1")
        await store.publish(record)
        assert await store.get(record.mx_source_id, "w1") == record
        bare = SourceRecord(
            mx_source_id="fedcba9876543210",
            worker_id="w2",
            identity=SourceIdentity(),
            worker_rank=0,
            status=SourceStatus.INITIALIZING,
            updated_at=T0,
        )
        await store.publish(bare)
        assert await store.get("fedcba9876543210", "w2") == bare
        assert await store.get(record.mx_source_id, "nope") is None
        assert await store.get("nope", "w1") is None


async def check_source_publish_replaces(open_store: OpenSourceStore) -> None:
    """A second publish for the same worker replaces the record wholly."""
    async with _opened_sources(open_store) as store:
        await store.publish(source("w1"))
        newer = source("w1", rank=3, status=SourceStatus.INITIALIZING, updated_at=T0 + 9)
        await store.publish(newer)
        assert await store.get(newer.mx_source_id, "w1") == newer
        assert len(await store.list(SourceQuery())) == 1


async def check_source_list_filters(open_store: OpenSourceStore) -> None:
    """Each filter narrows; results are ordered by (source, rank, worker) and cut to limit."""
    other = SourceIdentity(model_name="other/model")
    async with _opened_sources(open_store) as store:
        await store.publish(source("w-b", rank=1))
        await store.publish(source("w-a", rank=1, updated_at=T0 + 5))
        await store.publish(source("w-c", rank=0, status=SourceStatus.INITIALIZING))
        await store.publish(source("w-z", mx_source_id="ffff000000000000", identity=other))

        def ids(records: list[SourceRecord]) -> list[str]:
            return [r.worker_id for r in records]

        assert ids(await store.list(SourceQuery())) == ["w-c", "w-a", "w-b", "w-z"]
        one = SourceQuery(mx_source_id="0123456789abcdef")
        assert ids(await store.list(one)) == ["w-c", "w-a", "w-b"]
        assert ids(await store.list(SourceQuery(model_name="other/model"))) == ["w-z"]
        ready = SourceQuery(mx_source_id="0123456789abcdef", status=SourceStatus.READY)
        assert ids(await store.list(ready)) == ["w-a", "w-b"]
        assert ids(await store.list(SourceQuery(min_updated_at=T0 + 1))) == ["w-a"]
        assert ids(await store.list(SourceQuery(worker_rank=0))) == ["w-c", "w-z"]
        assert ids(await store.list(SourceQuery(limit=2))) == ["w-c", "w-a"]
        assert await store.list(SourceQuery(mx_source_id="0000000000000000")) == []


async def check_source_worker_ids(open_store: OpenSourceStore) -> None:
    """worker_ids names the source's workers, and only that source's."""
    async with _opened_sources(open_store) as store:
        assert await store.worker_ids("0123456789abcdef") == set()
        await store.publish(source("w-a"))
        await store.publish(source("w-b", rank=1))
        await store.publish(source("w-a", rank=2))  # a republish is no new worker
        await store.publish(source("w-z", mx_source_id="ffff000000000000"))
        assert await store.worker_ids("0123456789abcdef") == {"w-a", "w-b"}
        assert await store.worker_ids("ffff000000000000") == {"w-z"}


async def check_source_update_status(open_store: OpenSourceStore) -> None:
    """update_status is update-only; load is kept when None; metadata is untouched."""
    async with _opened_sources(open_store) as store:
        record = source("w1", status=SourceStatus.INITIALIZING)
        await store.publish(record)
        sid = record.mx_source_id
        assert not await store.update_status(sid, "ghost", SourceStatus.READY, 0.5, now=T0 + 1)
        assert await store.get(sid, "ghost") is None
        assert await store.update_status(sid, "w1", SourceStatus.READY, None, now=T0 + 2)
        got = await store.get(sid, "w1")
        assert got is not None
        assert got.status == SourceStatus.READY
        assert got.source_load == 0.25
        assert _near(got.updated_at, T0 + 2)
        assert got.metadata == record.metadata
        assert got.identity == record.identity
        assert await store.update_status(sid, "w1", SourceStatus.READY, 0.875, now=T0 + 3)
        loaded = await store.get(sid, "w1")
        assert loaded is not None
        assert loaded.source_load == 0.875


async def check_source_mark_stale_and_gc(open_store: OpenSourceStore) -> None:
    """mark_stale marks silent workers once, keeping updated_at; gc deletes old STALE ones."""
    async with _opened_sources(open_store) as store:
        await store.publish(source("old", updated_at=T0))
        await store.publish(source("init", status=SourceStatus.INITIALIZING, updated_at=T0))
        await store.publish(source("fresh", updated_at=T0 + 80))
        assert await store.mark_stale(90, now=T0 + 100) == 2
        assert await store.mark_stale(90, now=T0 + 100) == 0
        old = await store.get("0123456789abcdef", "old")
        assert old is not None
        assert old.status == SourceStatus.STALE
        assert _near(old.updated_at, T0)
        fresh = await store.get("0123456789abcdef", "fresh")
        assert fresh is not None
        assert fresh.status == SourceStatus.READY
        assert await store.gc(3600, now=T0 + 3000) == 0
        assert await store.gc(3600, now=T0 + 3601) == 2
        assert [r.worker_id for r in await store.list(SourceQuery())] == ["fresh"]
        # A STALE worker that heartbeats again is alive: READY and out of GC's reach.
        await store.publish(source("back", status=SourceStatus.STALE, updated_at=T0))
        assert await store.update_status(
            "0123456789abcdef", "back", SourceStatus.READY, None, now=T0 + 5000
        )
        assert await store.gc(3600, now=T0 + 5001) == 0


async def check_source_close_idempotent(open_store: OpenSourceStore) -> None:
    """close twice is harmless."""
    store = await open_store()
    await store.close()
    await store.close()


SOURCE_STORE_CHECKS: tuple[SourceStoreCheck, ...] = (
    check_source_roundtrip,
    check_source_publish_replaces,
    check_source_list_filters,
    check_source_worker_ids,
    check_source_update_status,
    check_source_mark_stale_and_gc,
    check_source_close_idempotent,
)
