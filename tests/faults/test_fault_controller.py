"""The controller SIGKILLed in the middle of a scale-up, then started again.

Engines are counted from outside, with psutil (by their command line) and from the local
runtime's state files, the whole time: a restarted controller must neither leave the
half-started engine running (an orphan) nor run a second one beside it (a duplicate).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil
import pytest

from flexinfer_testing import faultlog
from flexinfer_testing.clients import Call, tally, wait_until
from flexinfer_testing.stack import Stack, stack_factory

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(180)]


class EngineCensus:
    """Every engine pid seen, and the most that ran at once, sampled every 50 ms."""

    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.seen: set[int] = set()
        self.most_at_once = 0
        self._stop = threading.Event()

    def sample(self) -> None:
        """Count the engines running now."""
        pids = {p.pid for p in self.stack.all_engine_processes()}
        self.seen |= pids
        self.most_at_once = max(self.most_at_once, len(pids))

    @contextmanager
    def running(self) -> Iterator[EngineCensus]:
        """Sample in a background thread for the duration of the block."""

        def loop() -> None:
            while not self._stop.wait(0.05):
                self.sample()

        thread = threading.Thread(target=loop, name="engine-census")
        thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            thread.join()


def test_a_controller_killed_during_a_scale_up_converges_on_one_engine(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    """Injected: SIGKILL of the controller while the engine it just spawned for a cold
    start is still starting (state file ``starting``), then a new controller process.

    Asserted: the cold-start request (queued in the proxy the whole time) is answered 200;
    the half-started engine is gone, exactly one engine and one ready state file remain,
    and at no moment did two engines run.
    """
    with stack_factory("distributed", tmp_path, tiny_model_dir) as factory:
        stack = factory.start()
        rss_before = faultlog.rss_mib(factory.controller_process(stack).pid)
        stack.apply_model("tiny")
        census = EngineCensus(stack)
        with census.running():
            call = Call(stack.base_url, "tiny", max_tokens=4).start()
            starting = wait_until(
                lambda: [s for s in stack.engine_states() if s["state"] == "starting"],
                60, "the controller to start an engine",
            )  # fmt: skip
            first_pid = int(starting[0]["pid"])
            controller = factory.controller_process(stack)
            controller.kill()
            controller.wait(10)
            killed_at = time.monotonic()
            factory.start_controller(stack)
            call.join()
            engines = wait_until(
                lambda: converged(stack), 60, "one engine with one ready state file"
            )
            converged_at = time.monotonic()
        rss_after = faultlog.rss_mib(factory.controller_process(stack).pid)
    faultlog.record(
        "controller SIGKILL during a scale-up, then restarted",
        f"cold-start request: {tally([call])}; engines seen {len(census.seen)}, "
        f"at most {census.most_at_once} at once",
        converged_at - killed_at,
        rss_mib=f"controller {rss_before} (first) / {rss_after} (restarted)",
    )
    assert call.outcome == "200", repr(call.error)
    assert first_pid not in {p.pid for p in engines}, "the half-started engine was not replaced"
    assert first_pid not in {p.pid for p in stack.all_engine_processes()}, "orphan engine"
    assert census.most_at_once == 1, f"two engines ran at once: {sorted(census.seen)}"


def converged(stack: Stack) -> list[psutil.Process]:
    """The engines, once exactly one runs and exactly one state file says ``ready``."""
    engines = stack.all_engine_processes()
    states = stack.engine_states()
    if len(engines) == 1 and len(states) == 1 and states[0]["state"] == "ready":
        return list(engines)
    return []
