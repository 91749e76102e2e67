"""A failed reconcile in status (core/failures.py), in local mode: a PermanentError fails the
Model until its spec changes, a TemporaryError is retried after its delay, anything else
shows after SURFACE_AFTER failures in a row. The failing step is a shared-GPU hook that
raises as told: the plug-in point of step 4, run by the real reconcile core.
"""

from __future__ import annotations

from pathlib import Path

from flexinfer_common.api import Model, ModelStatus
from flexinfer_common.api.status import GPUStatus
from flexinfer_common.errors import PermanentError, TemporaryError
from flexinfer_controller.core.controller import Controller
from flexinfer_controller.core.failures import SURFACE_AFTER, Failures
from flexinfer_controller.core.sharing import NoSharing, Sharing
from flexinfer_controller.core.workers import Backoff
from flexinfer_controller.testing import (
    Harness,
    eventually,
    fake_model_dir,
    model_doc,
    run_controller,
)

KEY = "default/tiny"


class FailingHook(NoSharing):
    """A shared-GPU hook that raises ``errors`` one per call, then lets every Model run."""

    def __init__(self, *errors: Exception) -> None:
        self.errors = list(errors)
        self.calls = 0

    async def arbitrate(self, model: Model, placement: GPUStatus, desired: int) -> Sharing:
        """The next error, or ``desired``."""
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return Sharing(desired)


def reconciled(status: ModelStatus) -> tuple[str, str, str, int | None] | None:
    """The Reconciled condition as (status, reason, message, observedGeneration), if any."""
    for c in status.conditions:
        if c.type == "Reconciled":
            return c.status, c.reason, c.message, c.observed_generation
    return None


def core(h: Harness) -> Controller:
    controller: Controller = h.app.state.controller
    return controller


async def test_a_permanent_error_fails_the_model_until_its_spec_changes(tmp_path: Path) -> None:
    source = fake_model_dir(tmp_path / "m").as_uri()
    hook = FailingHook(PermanentError("group g is misconfigured", status_reason="GroupInvalid"))
    async with run_controller(tmp_path, shared_gpu=hook) as h:
        await h.put_model(model_doc("tiny", source))
        failed = await h.wait_phase("tiny", "Failed")
        told = reconciled(failed.status)
        assert told is not None
        assert told[:2] == ("False", "GroupInvalid")
        assert "group g is misconfigured" in told[2]
        assert told[3] == failed.metadata.generation == failed.status.observed_generation
        assert failed.status.message == told[2]

        # Events and resyncs do not retry it: the same spec would fail the same way.
        assert await core(h).sync(KEY)
        await core(h).resync()
        assert await core(h).sync(KEY)
        assert hook.calls == 1
        assert core(h).queue.due_in(KEY) is None, "no retry is scheduled either"

        await h.put_model(model_doc("tiny", source, idle_timeout="600s"))
        idle = await h.wait_phase("tiny", "Idle")
        assert reconciled(idle.status) is None
        assert hook.calls == 2


async def test_a_temporary_error_is_told_and_retried_after_its_delay(tmp_path: Path) -> None:
    source = fake_model_dir(tmp_path / "m").as_uri()
    hook = FailingHook(TemporaryError("group g is swapping", delay=1.0, status_reason="Swapping"))
    async with run_controller(tmp_path, shared_gpu=hook) as h:
        await h.put_model(model_doc("tiny", source))

        async def told() -> bool:
            model = await h.store.get_model("default", "tiny")
            return reconciled(model.status) is not None

        await eventually(told)
        model = await h.store.get_model("default", "tiny")
        state, reason, message, _ = reconciled(model.status) or ("", "", "", None)
        assert (state, reason) == ("False", "Swapping")
        assert "group g is swapping; retrying in 1.0s" in message
        due = core(h).queue.due_in(KEY)
        assert due is not None
        assert 0 < due <= 1.0
        # A reconcile asked for before the retry is due waits for it.
        assert await core(h).sync(KEY)
        assert hook.calls == 1

        idle = await h.wait_phase("tiny", "Idle")
        assert reconciled(idle.status) is None
        assert hook.calls == 2


async def test_an_unclassified_error_shows_after_failures_in_a_row(tmp_path: Path) -> None:
    source = fake_model_dir(tmp_path / "m").as_uri()
    hook = FailingHook(*[RuntimeError("a bug") for _ in range(SURFACE_AFTER)])
    async with run_controller(tmp_path, shared_gpu=hook) as h:
        await h.put_model(model_doc("tiny", source))
        seen: list[tuple[str, str, str, int | None]] = []

        async def shown() -> bool:
            told = reconciled((await h.store.get_model("default", "tiny")).status)
            seen.extend([told] if told is not None else [])
            return bool(seen)

        await eventually(shown)
        assert hook.calls >= SURFACE_AFTER
        state, reason, message, _ = seen[0]
        assert (state, reason) == ("False", "ReconcileError")
        assert f"RuntimeError: a bug; failed {SURFACE_AFTER} times in a row" in message
        idle = await h.wait_phase("tiny", "Idle")
        assert reconciled(idle.status) is None


def test_only_the_nth_unclassified_failure_in_a_row_is_told() -> None:
    backoff = Backoff(max_s=30.0)
    failures = Failures(backoff)
    model = Model.model_validate(model_doc("tiny", "file:///m") | {"metadata": {"name": "tiny"}})
    told = []
    for _ in range(SURFACE_AFTER):
        told.append(failures.retrying(model, RuntimeError("a bug")))
        backoff.failed(model.key, RuntimeError("a bug"))
    assert told[:-1] == [None] * (SURFACE_AFTER - 1)
    assert told[-1] is not None
    # A temporary error is told at once, with the delay the worker will use.
    backoff.succeeded(model.key)
    error = TemporaryError("later", delay=7.0)
    status = failures.retrying(model, error)
    assert status is not None
    assert "retrying in 7.0s" in (reconciled(status) or ("", "", "", None))[2]
    assert backoff.failed(model.key, error) == 7.0
