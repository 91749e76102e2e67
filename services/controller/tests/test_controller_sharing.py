"""Reconcile step 4, the shared-GPU hook (core/sharing.py), in local mode on a declared GPU:
what the hook answers is what runs, and its verdict is the Model's phase and reason.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from flexinfer_common.api import Model
from flexinfer_common.api.status import GPUStatus
from flexinfer_controller.core.sharing import Hold, NoSharing, SharedVerdict, Sharing
from flexinfer_controller.testing import fake_model_dir, model_doc, run_controller

GPU = [{"vendor": "nvidia", "arch": "sm_89", "vram": "24Gi", "node": "n1"}]


class OneAtATime(NoSharing):
    """A GPU group runs one Model at a time: the first that wants replicas holds the GPU
    until it wants none; the others are Preempted meanwhile and looked at again soon."""

    def __init__(self) -> None:
        self.holder: dict[str, str] = {}
        self.placements: list[GPUStatus] = []

    async def arbitrate(self, model: Model, placement: GPUStatus, desired: int) -> Sharing:
        """``desired`` for the group's holder (or a Model of no group), else 0, Preempted."""
        self.placements.append(placement)
        group = model.spec.gpu_or_default.shared
        if group is None:
            return Sharing(desired)
        holder = self.holder.get(group)
        if desired == 0:
            if holder == model.key:
                del self.holder[group]
            return Sharing(0)
        if holder in (None, model.key):
            self.holder[group] = model.key
            return Sharing(desired)
        message = f"GPU group {group} is held by {holder}"
        return Sharing(0, SharedVerdict(Hold.PREEMPTED, "Preempted", message), recheck_s=0.1)


def shared_doc(name: str, source: str, **serverless: Any) -> dict[str, Any]:
    doc = model_doc(name, source, **serverless)
    doc["spec"]["gpu"] = {"vendor": "nvidia", "shared": "g"}
    return doc


def loaded(model: Model) -> tuple[str, str, str]:
    cond = {c.type: c for c in model.status.conditions}["Loaded"]
    return cond.status, cond.reason, cond.message


async def test_the_hook_holds_a_model_preempted_while_its_group_is_busy(tmp_path: Path) -> None:
    source = fake_model_dir(tmp_path / "m").as_uri()
    hook = OneAtATime()
    async with run_controller(tmp_path, shared_gpu=hook, gpus=GPU) as h:
        await h.put_model(shared_doc("a", source, minReplicas=1))
        await h.wait_phase("a", "Ready")
        await h.put_model(shared_doc("b", source, minReplicas=1))
        b = await h.wait_phase("b", "Preempted")
        assert loaded(b) == ("False", "Preempted", "GPU group g is held by default/a")
        assert b.status.message == "GPU group g is held by default/a"
        assert (b.status.desired_replicas, b.status.replicas) == (0, 0)
        assert b.status.gpu is not None
        assert b.status.gpu.node == "n1"
        assert hook.placements[-1].vendor == "nvidia"

        # a goes idle, wanting no replica: the group's GPU goes to b, which the recheck finds.
        await h.put_model(shared_doc("a", source, minReplicas=0, idleTimeout="1s"))
        await h.wait_phase("a", "Idle")
        b = await h.wait_phase("b", "Ready")
        assert loaded(b)[1] == "BackendReady"
        assert b.status.message is None


async def test_without_a_hook_models_of_a_group_run_side_by_side(tmp_path: Path) -> None:
    source = fake_model_dir(tmp_path / "m").as_uri()
    async with run_controller(tmp_path, gpus=GPU) as h:
        await h.put_model(shared_doc("a", source, minReplicas=1))
        await h.put_model(shared_doc("b", source, minReplicas=1))
        for name in ("a", "b"):
            ready = await h.wait_phase(name, "Ready")
            assert (ready.status.desired_replicas, ready.status.ready_replicas) == (1, 1)
            assert loaded(ready)[1] == "BackendReady"
