"""P2P sources: the source id matches modelexpress's, freshness, the reaper and GC."""

from __future__ import annotations

import time

import modelexpress.p2p_pb2 as mx_p2p
import pytest
from modelexpress.metadata.source_id import compute_mx_source_id as their_id

from flexinfer_common.mx_identity import compute_mx_source_id
from flexinfer_registry.adapters.stores.memory import MemorySourceStore
from flexinfer_registry.core.records import SourceStatus
from flexinfer_registry.core.sources import ListFilter, Publication, SourceRegistry
from flexinfer_registry.server.p2p_convert import identity_from_proto

IDENTITIES = [
    mx_p2p.SourceIdentity(),
    mx_p2p.SourceIdentity(mx_version="0.7.0", model_name="Qwen/Qwen2.5-7B", dtype="BFloat16"),
    mx_p2p.SourceIdentity(
        model_name="M",
        extra_parameters={"B": "X", "b": "y", "a": "Ü"},
        tensor_parallel_size=8,
        pipeline_parallel_size=2,
        expert_parallel_size=4,
        backend_framework=2,
        mx_source_type=3,
        quantization="FP8",
        revision="ABCDEF",
    ),
    mx_p2p.SourceIdentity(
        model_name="m",
        backend_framework_version="0.9",
        torch_version="2.6",
        cuda_version="12.8",
        triton_version="3.2",
        gpu_arch="SM_90",
        compile_config_digest="DEAD",
    ),
]


@pytest.mark.parametrize("identity", IDENTITIES)
def test_source_id_matches_modelexpress(identity: mx_p2p.SourceIdentity) -> None:
    ours = compute_mx_source_id(identity_from_proto(identity))
    assert ours == their_id(identity)
    assert len(ours) == 16


class Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


def publication(worker_id: str, status: SourceStatus = SourceStatus.READY) -> Publication:
    return Publication(
        identity=identity_from_proto(IDENTITIES[1]),
        worker_id=worker_id,
        worker_rank=0,
        status=status,
        metadata=b"",
    )


async def test_freshness_reaper_and_gc() -> None:
    clock = Clock()
    registry = SourceRegistry(
        MemorySourceStore(), heartbeat_timeout_s=90, gc_timeout_s=3600, clock=clock
    )
    ready = ListFilter(status=SourceStatus.READY)
    old = await registry.publish(publication("old"))
    clock.now += 60
    await registry.publish(publication("new"))
    assert [r.worker_id for r in await registry.list(ready)] == ["new", "old"]
    clock.now += 31  # "old" is 91 s silent: hidden at once, before any reaper pass
    assert [r.worker_id for r in await registry.list(ready)] == ["new"]
    assert len(await registry.list(ListFilter())) == 2
    assert await registry.reap() == (1, 0)
    stale = await registry.get(old.mx_source_id, "old")
    assert stale is not None
    assert stale.status == SourceStatus.STALE
    # A heartbeat with load keeps "new" alive; its load is returned.
    assert await registry.update_status(old.mx_source_id, "new", 0, SourceStatus.READY, 0.75)
    clock.now += 3600
    assert await registry.reap() == (1, 1)  # "new" went silent; "old" is GC'd
    assert [r.worker_id for r in await registry.list(ListFilter())] == ["new"]
    fresh = await registry.get(old.mx_source_id, "new")
    assert fresh is not None
    assert fresh.source_load == 0.75


async def test_update_status_by_rank_for_older_clients() -> None:
    registry = SourceRegistry(MemorySourceStore())
    record = await registry.publish(publication("w", SourceStatus.UNKNOWN))
    assert record.status == SourceStatus.INITIALIZING
    assert await registry.update_status(record.mx_source_id, "", 0, SourceStatus.READY, None)
    assert not await registry.update_status(record.mx_source_id, "", 5, SourceStatus.READY, None)
