"""Scale-out through the controller (core/autoscaler.py in the reconcile): the stand-in
engine's metrics page says how many requests it holds; the local runtime starts a second
replica when a GPU is free, waits with a reason (and starts nothing more) when none is,
holds the count while no page can be read, and goes back to minReplicas once the load is
gone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from flexinfer_common.api.status import AutoscalingStatus
from flexinfer_controller.core.controller import Controller
from flexinfer_controller.runtime import ReplicaState
from flexinfer_controller.testing import (
    Harness,
    eventually,
    fake_model_dir,
    model_doc,
    run_controller,
)
from flexinfer_testing.scrape import sample_value, scrape

KEY = "default/m"
SCALEOUT = {"tick_s": 0.1, "stable_window_s": 1.0, "panic_window_s": 0.3, "scale_down_delay_s": 0.5}
GPU = {"vendor": "nvidia", "count": 1, "arch": "sm_90", "vram": "24Gi", "node": "n1"}


def scaled_doc(source: str) -> dict[str, Any]:
    """One warm replica (minReplicas 1), up to 2, one in-flight request each, on a GPU."""
    doc = model_doc("m", source, minReplicas=1, maxReplicas=2, targetConcurrency=1)
    doc["spec"]["gpu"] = {"vendor": "nvidia", "vramEstimateMB": 1000}
    return doc


def load(model_dir: Path, waiting: int) -> None:
    """What the engines' metrics pages say they queue (the stand-in re-reads it per scrape)."""
    (model_dir / "metrics.txt").write_text(f"flexinfer_engine_num_requests_waiting {waiting}\n")


def ready(h: Harness) -> int:
    controller: Controller = h.app.state.controller
    return sum(r.state is ReplicaState.READY for r in controller.runtime.list(KEY))


async def counter(h: Harness, sample: str, **labels: str) -> float:
    """A sample of the controller's /metrics (0 when it has none yet)."""
    return sample_value(await scrape(h.client), sample, **labels) or 0.0


async def autoscaling(h: Harness) -> AutoscalingStatus | None:
    """The Model's status.autoscaling as the store has it now."""
    return (await h.store.get_model("default", "m")).status.autoscaling


async def at_max_replicas(h: Harness) -> AutoscalingStatus:
    """Wait until both replicas serve and the status says the load wants more; the status
    that said so (a later read may already be another reconcile's). A condition, not a
    snapshot: on a busy machine a reconcile may see a window with no reading yet, and says
    so (NoMetrics) before the next look."""
    seen: list[AutoscalingStatus] = []

    async def both() -> bool:
        scaling = await autoscaling(h)
        if ready(h) == 2 and scaling is not None and scaling.reason == "AtMaxReplicas":
            seen.append(scaling)
        return bool(seen)

    await eventually(both, timeout_s=20)
    return seen[0]


async def test_load_adds_a_replica_on_a_free_gpu_and_goes_back_after(tmp_path: Path) -> None:
    model_dir = fake_model_dir(tmp_path / "m")
    load(model_dir, 5)
    async with run_controller(tmp_path, gpus=[{**GPU, "count": 2}], scaleout=SCALEOUT) as h:
        await h.put_model(scaled_doc(model_dir.as_uri()))
        scaling = await at_max_replicas(h)
        # Each stand-in page says 5 waiting, so the window's sum is 5 with one replica
        # scraped and 10 once the second one's page joins it: the average lies between.
        assert scaling.target_concurrency == 1
        assert scaling.recommended_replicas in range(5, 11), scaling
        assert scaling.last_scale_time is not None
        load(model_dir, 0)
        await eventually(lambda: ready(h) == 1, timeout_s=20)

        async def settled() -> bool:
            model = await h.store.get_model("default", "m")
            scaling = model.status.autoscaling
            return (
                model.status.desired_replicas == 1
                and scaling is not None
                and (scaling.reason == "Stable")
            )

        await eventually(settled, timeout_s=10)
        assert await counter(h, "flexinfer_controller_scale_events_total", direction="down") == 1


async def test_pages_that_cannot_be_read_hold_the_count(tmp_path: Path) -> None:
    model_dir = fake_model_dir(tmp_path / "m")
    load(model_dir, 5)
    async with run_controller(tmp_path, gpus=[{**GPU, "count": 2}], scaleout=SCALEOUT) as h:
        await h.put_model(scaled_doc(model_dir.as_uri()))
        await at_max_replicas(h)
        (model_dir / "metrics.down").touch()  # every page now answers 503

        async def no_metrics() -> bool:
            scaling = await autoscaling(h)
            return scaling is not None and scaling.reason == "NoMetrics"

        await eventually(no_metrics, timeout_s=20)
        # 30 more looks, one a tick (0.1 s): longer than the stable window (1 s) and the
        # scale-down delay (0.5 s) together, so an empty window read as no load would
        # have stopped a replica by now.
        reconciles = "flexinfer_controller_reconciles_total"
        looked = await counter(h, reconciles, result="ok")

        async def looked_again() -> bool:
            return await counter(h, reconciles, result="ok") >= looked + 30

        await eventually(looked_again, timeout_s=20)
        model = await h.store.get_model("default", "m")
        assert model.status.desired_replicas == 2
        assert ready(h) == 2
        assert await counter(h, "flexinfer_controller_scale_events_total", direction="down") == 0


async def test_no_free_gpu_waits_with_the_reason_and_starts_nothing(tmp_path: Path) -> None:
    model_dir = fake_model_dir(tmp_path / "m")
    load(model_dir, 5)
    async with run_controller(tmp_path, gpus=[GPU], scaleout=SCALEOUT) as h:
        await h.put_model(scaled_doc(model_dir.as_uri()))

        async def waiting() -> bool:
            scaling = await autoscaling(h)
            return scaling is not None and scaling.reason == "WaitingForGPU"

        await eventually(waiting, timeout_s=20)
        model = await h.store.get_model("default", "m")
        assert model.status.phase == "Ready"  # it serves on the replica it has
        assert model.status.desired_replicas == 2
        assert model.status.autoscaling is not None
        assert "GPU" in (model.status.autoscaling.message or ""), model.status.autoscaling
        # Many more looks (one a tick): none starts or stops a replica.
        reconciles = "flexinfer_controller_reconciles_total"
        looked = await counter(h, reconciles, result="ok")

        async def looked_again() -> bool:
            return await counter(h, reconciles, result="ok") >= looked + 20

        await eventually(looked_again, timeout_s=20)
        starts = await counter(h, "flexinfer_controller_engine_starts_total", backend="reference")
        assert starts == 1
        assert await counter(h, "flexinfer_controller_scale_events_total", direction="down") == 0
        assert ready(h) == 1
