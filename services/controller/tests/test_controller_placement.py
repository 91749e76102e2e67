"""GPU placement with the scheduler's core (core/placement.py), alone and through the
local controller: the filters' reasons, the scorers' pick, pinned engines, freed GPUs."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil
import pytest

from flexinfer_common.placement import InMemoryBenchmarks, benchmark_key, device_class
from flexinfer_common.settings import StoreSettings
from flexinfer_common.store import BenchmarkRecord, create_store
from flexinfer_controller.core.gpu import (
    Choice,
    GPUAssignment,
    GPURequest,
    Hold,
    NodeGPU,
    Unplaced,
    declared_labels,
)
from flexinfer_controller.core.placement import CorePlacer
from flexinfer_controller.testing import (
    Harness,
    engine_pids,
    eventually,
    fake_model_dir,
    model_doc,
    run_controller,
)

L4 = NodeGPU(
    "n1", "nvidia", 2, "sm_89", 24576, labels=declared_labels("nvidia", 2, "sm_89", "24Gi")
)


def request(**fields: Any) -> GPURequest:
    values: dict[str, Any] = {"namespace": "default", "name": "m", "backend": "vllm", "count": 1}
    values.update(fields)
    return GPURequest(**values)


def hold(model: str, *devices: int, shared: str | None = None, mb: int | None = None) -> Hold:
    gpus = GPUAssignment("n1", "nvidia", devices, shared=shared, reserved_mb=mb, vram_mb=24576)
    return Hold(model, 1, gpus)


def choose(
    req: GPURequest, nodes: list[NodeGPU], holds: list[Hold], placer: CorePlacer | None = None
) -> Choice | Unplaced:
    return asyncio.run((placer or CorePlacer()).choose(req, nodes, holds))


# --- The placer alone -------------------------------------------------------------------


def test_a_model_with_the_gpu_to_itself_takes_a_free_one() -> None:
    assert choose(request(), [L4], []) == Choice(L4, (0,))
    assert choose(request(), [L4], [hold("default/a", 0)]) == Choice(L4, (1,))
    taken = choose(request(), [L4], [hold("default/a", 0), hold("default/b", 1)])
    assert isinstance(taken, Unplaced)
    assert taken.reason == "GPUInUse"
    assert "gpu 0 on n1: GPU in use: held by default/a" in taken.message
    assert "gpu 1 on n1: GPU in use: held by default/b" in taken.message


def test_too_big_for_every_gpu_names_the_roomiest_first() -> None:
    holds = [hold("default/s", 1, shared="g", mb=20000)]
    result = choose(request(vram_estimate_mb=81920), [L4], holds)
    assert isinstance(result, Unplaced)
    assert (result.reason, result.permanent) == ("VRAMInsufficient", False)
    assert result.message == (
        "no GPU can take a replica: "
        "gpu 0 on n1: Insufficient VRAM: 24576 MB free, 81920 MB needed (81920 MB x 1 GPU); "
        "gpu 1 on n1: Insufficient VRAM: 4576 MB free, 81920 MB needed (81920 MB x 1 GPU)"
    )


def test_a_shared_group_fits_beside_its_own_by_memory_only() -> None:
    holds = [hold("default/a", 0, shared="g", mb=8000), hold("default/x", 1)]
    # Beside its group on GPU 0 while memory lasts; GPU 1 is another Model's alone.
    fits = choose(request(shared="g", vram_estimate_mb=16000), [L4], holds)
    assert fits == Choice(L4, (0,))
    full = choose(request(shared="g", vram_estimate_mb=20000), [L4], holds)
    assert isinstance(full, Unplaced)
    assert "gpu 0 on n1: Insufficient VRAM: 16576 MB free, 20000 MB needed" in full.message
    # Another group does not join it, nor does a Model that wants a GPU to itself.
    assert isinstance(choose(request(shared="h", vram_estimate_mb=1), [L4], holds), Unplaced)
    assert isinstance(choose(request(), [L4], holds[:1]), Choice)  # GPU 1 is free now
    alone = choose(request(), [L4], [holds[0], hold("default/y", 1)])
    assert isinstance(alone, Unplaced)
    assert "held by default/a" in alone.message


def test_the_free_ratio_spreads_shared_models() -> None:
    holds = [hold("default/a", 0, shared="g", mb=12000)]
    assert choose(request(shared="g", vram_estimate_mb=1000), [L4], holds) == Choice(L4, (1,))


def test_several_gpus_come_from_one_node() -> None:
    big = NodeGPU("n2", "nvidia", 4, "sm_90", 81920, indices=(4, 5, 6, 7))
    got = choose(request(count=2), [L4, big], [hold("default/a", 0)])
    assert got == Choice(big, (4, 5))
    full = choose(request(count=2), [L4], [hold("default/a", 0)])
    assert isinstance(full, Unplaced)
    assert "gpus 0,1 on n1: GPU in use: held by default/a" in full.message


def test_the_benchmarked_device_class_wins() -> None:
    fast = NodeGPU(
        "n2", "nvidia", 1, "sm_90", 81920, labels=declared_labels("nvidia", 1, "sm_90", "80Gi")
    )
    key = benchmark_key("vllm", "m", device_class(fast.labels))
    table = InMemoryBenchmarks({"default": {key: "30"}})
    placer = CorePlacer(benchmarks=table)
    # Both GPUs are all free (a tie broken by name, n1 first) until n2's TPS counts.
    assert choose(request(), [L4, fast], []) == Choice(L4, (0,))
    assert choose(request(), [L4, fast], [], placer) == Choice(fast, (0,))


def test_without_holds_nothing_is_pinned() -> None:
    placed = asyncio.run(CorePlacer().choose(request(), [L4], None))
    assert placed == Choice(L4, None)


# --- Through the local controller ---------------------------------------------------------


def engine_env(tmp_path: Path, name: str) -> dict[str, str]:
    """The environment of the one engine serving Model ``name``."""
    found = []
    for pid in engine_pids(tmp_path):
        env = psutil.Process(pid).environ()
        if env.get("FLEXINFER_REPLICA_ID", "").startswith(f"default_{name}-"):
            found.append(env)
    assert len(found) == 1, found
    return found[0]


def schedulable(h: Harness, model: Any) -> tuple[str, str, str]:
    cond = {c.type: c for c in model.status.conditions}["Schedulable"]
    return cond.status, cond.reason, cond.message


TWO_L4 = [{"vendor": "nvidia", "count": 2, "arch": "sm_89", "vram": "24Gi", "node": "box"}]


async def test_a_model_too_big_for_every_gpu_stays_pending_with_the_filters_reason(
    tmp_path: Path,
) -> None:
    source = fake_model_dir(tmp_path / "m").as_uri()
    async with run_controller(tmp_path, gpus=TWO_L4) as h:
        doc = model_doc("big", source, minReplicas=1)
        doc["spec"]["gpu"] = {"vendor": "nvidia", "vramEstimateMB": 81920}
        await h.put_model(doc)
        pending = await h.wait_phase("big", "Pending")
        status, reason, message = schedulable(h, pending)
        assert (status, reason) == ("False", "VRAMInsufficient")
        assert "gpu 0 on box: Insufficient VRAM: 24576 MB free, 81920 MB needed" in message
        assert pending.status.message == message
        assert pending.status.gpu is None
        assert engine_pids(tmp_path) == []


async def test_replicas_are_pinned_to_the_gpus_placement_picks(tmp_path: Path) -> None:
    source = fake_model_dir(tmp_path / "m").as_uri()
    async with run_controller(tmp_path, gpus=TWO_L4) as h:
        doc = model_doc("a", source, minReplicas=1)
        doc["spec"]["gpu"] = {"vendor": "nvidia"}
        await h.put_model(doc)
        ready = await h.wait_phase("a", "Ready")
        gpu = ready.status.gpu
        assert gpu is not None
        assert (gpu.node, gpu.device, gpu.vendor, gpu.architecture, gpu.memory_mb) == (
            "box",
            "0",
            "nvidia",
            "sm_89",
            24576,
        )
        env = engine_env(tmp_path, "a")
        assert (env["CUDA_VISIBLE_DEVICES"], env["CUDA_DEVICE_ORDER"]) == ("0", "PCI_BUS_ID")

        doc = model_doc("b", source, minReplicas=1)
        doc["spec"]["gpu"] = {"vendor": "nvidia"}
        await h.put_model(doc)
        second = await h.wait_phase("b", "Ready")
        assert second.status.gpu is not None
        assert second.status.gpu.device == "1"
        assert engine_env(tmp_path, "b")["CUDA_VISIBLE_DEVICES"] == "1"

        # Both GPUs are taken: a third Model waits, saying by whom.
        doc = model_doc("c", source, minReplicas=1)
        doc["spec"]["gpu"] = {"vendor": "nvidia"}
        await h.put_model(doc)
        waiting = await h.wait_phase("c", "Pending")
        status, reason, message = schedulable(h, waiting)
        assert (status, reason) == ("False", "GPUInUse")
        assert "gpu 0 on box: GPU in use: held by default/a" in message

        # Deleting a frees its GPU: c is placed there as soon as a's engine has exited.
        response = await h.client.delete("/v1/admin/models/a")
        assert response.status_code in (200, 202, 204), response.text
        placed = await h.wait_phase("c", "Ready")
        assert placed.status.gpu is not None
        assert placed.status.gpu.device == "0"
        assert engine_env(tmp_path, "c")["CUDA_VISIBLE_DEVICES"] == "0"


async def test_scaling_to_zero_frees_the_gpu_for_the_next_model(tmp_path: Path) -> None:
    source = fake_model_dir(tmp_path / "m").as_uri()
    one = [{"vendor": "amd", "arch": "gfx1100", "vram": "24Gi", "node": "box"}]
    async with run_controller(tmp_path, gpus=one) as h:
        first = model_doc("a", source, minReplicas=1)
        first["spec"]["gpu"] = {"vendor": "amd"}
        await h.put_model(first)
        await h.wait_phase("a", "Ready")
        assert engine_env(tmp_path, "a")["HIP_VISIBLE_DEVICES"] == "0"
        second = model_doc("b", source, minReplicas=1)
        second["spec"]["gpu"] = {"vendor": "amd"}
        await h.put_model(second)
        await h.wait_phase("b", "Pending")

        first = model_doc("a", source, idle_timeout="1s", minReplicas=0)  # idle in 1 s
        first["spec"]["gpu"] = {"vendor": "amd"}
        await h.put_model(first)
        ready = await h.wait_phase("b", "Ready")
        assert ready.status.gpu is not None
        assert ready.status.gpu.device == "0"
        assert engine_env(tmp_path, "b")["HIP_VISIBLE_DEVICES"] == "0"
        # The idle Model now waits for the GPU b holds (it would start only when b frees it).
        idle = await h.wait_phase("a", "Pending")
        assert schedulable(h, idle)[1] == "GPUInUse"


async def test_each_replica_gets_its_own_gpu(tmp_path: Path) -> None:
    source = fake_model_dir(tmp_path / "m").as_uri()
    async with run_controller(tmp_path, gpus=TWO_L4) as h:
        doc = model_doc("a", source, minReplicas=2, maxReplicas=2)
        doc["spec"]["gpu"] = {"vendor": "nvidia"}
        await h.put_model(doc)
        await h.wait_phase("a", "Ready")

        def devices() -> list[str]:
            pids = engine_pids(tmp_path)
            return sorted(psutil.Process(p).environ()["CUDA_VISIBLE_DEVICES"] for p in pids)

        await eventually(lambda: devices() == ["0", "1"], timeout_s=10)


async def test_the_benchmark_table_steers_the_choice(tmp_path: Path) -> None:
    source = fake_model_dir(tmp_path / "m").as_uri()
    gpus = [
        {"vendor": "nvidia", "arch": "sm_89", "vram": "24Gi", "node": "a-l4"},
        {"vendor": "nvidia", "arch": "sm_90", "vram": "80Gi", "node": "b-h100"},
    ]
    async with run_controller(tmp_path, gpus=gpus) as h:
        h100 = device_class(declared_labels("nvidia", 1, "sm_90", "80Gi"))
        record = BenchmarkRecord("default", "reference", "fast", h100, 42.0, datetime.now(UTC))
        await h.store.put_benchmark(record)
        for name in ("fast", "plain"):
            doc = model_doc(name, source, minReplicas=1)
            doc["spec"]["gpu"] = {"vendor": "nvidia"}
            await h.put_model(doc)
        fast = await h.wait_phase("fast", "Ready")
        assert fast.status.gpu is not None
        assert fast.status.gpu.node == "b-h100"
        plain = await h.wait_phase("plain", "Ready")
        assert plain.status.gpu is not None
        assert plain.status.gpu.node == "a-l4"


@pytest.mark.parametrize("vendor", ["intel"])
def test_intel_engines_see_their_gpu_through_the_level_zero_mask(vendor: str) -> None:
    from flexinfer_controller.runtime.devices import visibility_env

    gpus = GPUAssignment("n", vendor, (2, 3))
    assert visibility_env(gpus) == {"ZE_AFFINITY_MASK": "2,3"}
    assert visibility_env(None) == {}


async def test_a_restarted_controller_counts_the_gpus_of_the_engines_it_adopts(
    tmp_path: Path,
) -> None:
    source = fake_model_dir(tmp_path / "m").as_uri()
    one = [{"vendor": "nvidia", "vram": "24Gi", "node": "box"}]
    store = create_store(StoreSettings(url=f"sqlite:///{tmp_path / 'shared.db'}"))
    try:
        async with run_controller(
            tmp_path, store=store, gpus=one, stop_engines_on_shutdown=False
        ) as h:
            doc = model_doc("a", source, minReplicas=1)
            doc["spec"]["gpu"] = {"vendor": "nvidia"}
            await h.put_model(doc)
            await h.wait_phase("a", "Ready")
        async with run_controller(tmp_path, store=store, gpus=one) as h:
            adopted = await h.wait_phase("a", "Ready")
            assert adopted.status.gpu is not None
            assert adopted.status.gpu.device == "0"
            doc = model_doc("b", source, minReplicas=1)
            doc["spec"]["gpu"] = {"vendor": "nvidia"}
            await h.put_model(doc)
            waiting = await h.wait_phase("b", "Pending")
            assert "GPU in use: held by default/a" in schedulable(h, waiting)[2]
    finally:
        await store.close()
