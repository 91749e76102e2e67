"""The reconcile workers every loop shares: backoff per key, and a worker that survives."""

from __future__ import annotations

import asyncio
import logging

import pytest

from flexinfer_common.errors import PermanentError, TemporaryError
from flexinfer_controller.core.queue import WorkQueue
from flexinfer_controller.core.workers import Backoff, run_worker
from flexinfer_controller.testing import eventually


def test_backoff_doubles_per_key_up_to_its_cap_and_resets_on_success() -> None:
    backoff = Backoff(max_s=1.0)
    error = PermanentError("no")
    assert [backoff.failed("a", error) for _ in range(5)] == [0.2, 0.4, 0.8, 1.0, 1.0]
    assert backoff.failed("b", error) == 0.2  # keys count apart
    backoff.succeeded("a")
    assert backoff.failed("a", error) == 0.2


def test_a_temporary_errors_own_delay_wins_up_to_the_cap() -> None:
    backoff = Backoff(max_s=30.0)
    assert backoff.failed("a", TemporaryError("later", delay=7.0)) == 7.0
    assert backoff.failed("b", TemporaryError("much later", delay=300.0)) == 30.0
    assert backoff.failed("c", TemporaryError("soon", delay=0.01)) == 0.2


async def test_a_failing_key_is_retried_and_the_worker_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    queue = WorkQueue()
    seen: list[str] = []
    outcomes: list[bool] = []

    async def reconcile(key: str) -> None:
        seen.append(key)
        if key == "bad" and seen.count("bad") < 3:
            raise RuntimeError("a bug")

    worker = asyncio.create_task(
        run_worker(queue, reconcile, Backoff(max_s=0.05), "model", outcomes.append)
    )
    try:
        with caplog.at_level(logging.WARNING):
            queue.add("bad")
            queue.add("good")
            await eventually(lambda: seen.count("bad") == 3 and "good" in seen)
        await eventually(lambda: len(outcomes) == 4)
        assert outcomes.count(False) == 2
        assert "model bad: reconcile failed" in caplog.text
    finally:
        queue.shut_down()
        await asyncio.wait_for(worker, 5)
