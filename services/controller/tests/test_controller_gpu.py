"""detectGPU and the compatibility check (core/gpu.py), alone and through the controller."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from flexinfer_common.api import GPUSpec
from flexinfer_controller.backends import default_backends
from flexinfer_controller.backends.base import Backend
from flexinfer_controller.core.controller import Controller
from flexinfer_controller.core.gpu import (
    RECHECK_S,
    GPURequest,
    NodeGPU,
    Placement,
    Unplaced,
    node_gpu,
    parse_vram_mb,
    place,
)
from flexinfer_controller.core.placement import CorePlacer
from flexinfer_controller.testing import fake_model_dir, model_doc, run_controller

A100 = NodeGPU("a", "nvidia", 8, "sm_80", 81920)
L4 = NodeGPU("b", "nvidia", 1, "sm_89", 24576)
MI300 = NodeGPU("c", "amd", 8, "gfx942", 196608)
ARC = NodeGPU("d", "intel", 1, None, 16384)


def backend(name: str) -> Backend:
    found = default_backends().get(name)
    assert found is not None
    return found


def gpu(**fields: Any) -> GPUSpec:
    return GPUSpec.model_validate(fields)


def placed(spec: GPUSpec, fleet: list[NodeGPU], name: str = "vllm") -> Placement | Unplaced:
    """Placement on a fleet whose GPUs the runtime does not pin (no holds: Kubernetes)."""
    request = GPURequest(
        "default", "m", name, spec.effective_count, spec.vram_estimate_mb, spec.shared
    )
    return asyncio.run(place(spec, fleet, backend(name), CorePlacer(), request))


def reason(result: Placement | Unplaced) -> tuple[str, bool]:
    assert isinstance(result, Unplaced), result
    return result.reason, result.permanent


@pytest.mark.parametrize(
    ("value", "mib"),
    [("24Gi", 24576), ("80G", 76293), ("512Mi", 512), ("1Ti", 1048576), ("1.5Gi", 1536)],
)
def test_vram_quantities(value: str, mib: int) -> None:
    assert parse_vram_mb(value) == mib


@pytest.mark.parametrize("value", ["", "lots", "24 Gi", "-1Gi", "0x10"])
def test_vram_that_is_no_quantity(value: str) -> None:
    assert parse_vram_mb(value) is None


def test_node_labels_as_the_agent_writes_them() -> None:
    labels = {
        "flexinfer.ai/gpu.vendor": "NVIDIA",
        "flexinfer.ai/gpu.arch": "sm_89",
        "flexinfer.ai/gpu.vram": "24Gi",
        "flexinfer.ai/gpu.count": "2",
        "flexinfer.ai/gpu.int4": "true",
    }
    assert node_gpu("n1", labels) == NodeGPU("n1", "nvidia", 2, "sm_89", 24576)
    assert node_gpu("n2", {"kubernetes.io/os": "linux"}) is None
    odd = node_gpu("n3", {"flexinfer.ai/gpu.vendor": "AMD", "flexinfer.ai/gpu.count": "x"})
    assert odd == NodeGPU("n3", "amd", 1, None, None)


def test_cpu_needs_no_gpu() -> None:
    assert placed(gpu(vendor="cpu"), [A100], "reference") == Placement("cpu")


def test_auto_takes_the_one_vendor_and_the_roomiest_node() -> None:
    result = placed(gpu(), [L4, A100])
    assert result == Placement("nvidia", A100)


def test_auto_with_two_vendors_is_ambiguous_and_waits() -> None:
    result = placed(gpu(), [A100, MI300])
    assert reason(result) == ("AmbiguousGPUVendor", False)
    assert isinstance(result, Unplaced)
    assert "amd and nvidia" in result.message


def test_a_vendor_the_backend_lacks_does_not_make_auto_ambiguous() -> None:
    assert placed(gpu(), [A100, ARC]) == Placement("nvidia", A100)  # vLLM has no Intel build


def test_explicit_vendor_settles_a_mixed_fleet() -> None:
    assert placed(gpu(vendor="amd"), [A100, MI300]) == Placement("amd", MI300)


def test_auto_without_gpus_runs_on_the_cpu_only_where_the_backend_can() -> None:
    assert placed(gpu(), [], "reference") == Placement("cpu")
    assert reason(placed(gpu(), [])) == ("NoGPUNodes", False)


def test_explicit_vendor_the_backend_does_not_support_fails() -> None:
    assert reason(placed(gpu(vendor="cpu"), [], "vllm")) == ("GPUVendorUnsupported", True)


def test_explicit_vendor_with_no_such_node_waits() -> None:
    assert reason(placed(gpu(vendor="amd"), [A100])) == ("NoMatchingGPU", False)


@pytest.mark.parametrize(
    ("node", "ok"),
    [
        (NodeGPU("p", "nvidia", 1, "sm_60"), False),  # Pascal: below vLLM's 7.0
        (NodeGPU("v", "nvidia", 1, "sm_70"), True),
        (NodeGPU("r", "amd", 1, "gfx906"), False),  # MI50: not in vLLM's ROCm list
        (NodeGPU("r", "amd", 1, "gfx1100"), True),
        (NodeGPU("u", "nvidia", 1, None), True),  # unlabelled arch: not checked
    ],
)
def test_vllm_architectures(node: NodeGPU, ok: bool) -> None:
    result = placed(gpu(vendor=node.vendor), [node])
    if ok:
        assert result == Placement(node.vendor, node)
    else:
        assert reason(result) == ("GPUArchUnsupported", True)
    # llama.cpp documents no such limit.
    assert placed(gpu(vendor=node.vendor), [node], "llamacpp") == Placement(node.vendor, node)


def test_count_and_vram_must_fit_one_node() -> None:
    assert reason(placed(gpu(count=4), [L4])) == ("InsufficientGPUs", False)
    too_big = placed(gpu(vramEstimateMB=40000), [L4])
    assert reason(too_big) == ("VRAMInsufficient", False)
    assert isinstance(too_big, Unplaced)
    # The placement core's free-VRAM filter says why, for the GPU with the most room.
    assert "gpu 0 on b: Insufficient VRAM: 24576 MB free, 40000 MB needed" in too_big.message
    assert placed(gpu(vramEstimateMB=40000), [L4, A100]) == Placement("nvidia", A100)
    unknown = NodeGPU("x", "nvidia", 1, "sm_89", None)  # no vram label: not checked
    assert placed(gpu(vramEstimateMB=40000), [unknown]) == Placement("nvidia", unknown)


# --- Through the controller: declared GPUs in local mode -------------------------------


def declared(*gpus: dict[str, Any]) -> list[dict[str, Any]]:
    return list(gpus)


async def test_an_ambiguous_fleet_keeps_the_model_pending_until_the_vendor_is_set(
    tmp_path: Path,
) -> None:
    source = fake_model_dir(tmp_path / "m").as_uri()
    gpus = declared(
        {"vendor": "nvidia", "arch": "sm_89", "vram": "24Gi", "node": "n1"},
        {"vendor": "amd", "arch": "gfx1100", "vram": "24Gi", "node": "n2"},
    )
    async with run_controller(tmp_path, gpus=gpus) as h:
        doc = model_doc("tiny", source)
        doc["spec"]["gpu"] = {"vendor": "auto"}
        await h.put_model(doc)
        pending = await h.wait_phase("tiny", "Pending")
        cond = {c.type: c for c in pending.status.conditions}["Schedulable"]
        assert (cond.status, cond.reason) == ("False", "AmbiguousGPUVendor")
        assert pending.status.message is not None
        assert "set spec.gpu.vendor" in pending.status.message
        assert pending.status.gpu is None
        # Looked at again in 30 s (the seed's requeue): the queue's timer shows it.
        controller: Controller = h.app.state.controller
        assert await controller.sync("default/tiny")
        due = controller.queue.due_in("default/tiny")
        assert due is not None
        assert RECHECK_S - 5 < due <= RECHECK_S

        doc = model_doc("tiny", source)
        doc["spec"]["gpu"] = {"vendor": "amd"}
        await h.put_model(doc)
        idle = await h.wait_phase("tiny", "Idle")
        assert idle.status.gpu is not None
        got = idle.status.gpu
        assert (got.node, got.vendor, got.architecture, got.memory_mb) == (
            "n2",
            "amd",
            "gfx1100",
            24576,
        )


async def test_a_model_larger_than_every_gpu_waits_with_the_reason(tmp_path: Path) -> None:
    source = fake_model_dir(tmp_path / "m").as_uri()
    gpus = declared({"vendor": "nvidia", "vram": "24Gi"})
    async with run_controller(tmp_path, gpus=gpus) as h:
        doc = model_doc("tiny", source, minReplicas=1)
        doc["spec"]["gpu"] = {"vendor": "nvidia", "vramEstimateMB": 81920}
        await h.put_model(doc)
        pending = await h.wait_phase("tiny", "Pending")
        cond = {c.type: c for c in pending.status.conditions}["Schedulable"]
        assert (cond.status, cond.reason) == ("False", "VRAMInsufficient")
        assert pending.status.desired_replicas == 0


async def test_without_declared_gpus_a_cpu_backend_runs_on_the_cpu(tmp_path: Path) -> None:
    source = fake_model_dir(tmp_path / "m").as_uri()
    async with run_controller(tmp_path) as h:
        doc = model_doc("tiny", source, minReplicas=1)
        doc["spec"]["gpu"] = {"vendor": "auto"}
        await h.put_model(doc)
        ready = await h.wait_phase("tiny", "Ready")
        assert ready.status.gpu is not None
        assert ready.status.gpu.vendor == "cpu"
        assert ready.status.gpu.node is None
