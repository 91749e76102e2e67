"""Scale-out by concurrency (core/scaleout.py) on a simulated clock: the count follows the
averaged in-flight requests, scales up at once, down only after the delay, never flaps,
stays within [the idle rule's count, maxReplicas], and goes to zero when idle."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import ValidationError

from flexinfer_common.api import ModelSpec
from flexinfer_common.api.model import DEFAULT_TARGET_CONCURRENCY
from flexinfer_controller.core.scaleout import (
    ScaleOut,
    ScaleOutPolicy,
    autoscaling_status,
    can_scale_out,
)
from flexinfer_controller.core.sharing.clock import ManualClock

KEY = "default/m"
POLICY = ScaleOutPolicy(
    tick_s=2.0, stable_window_s=60.0, panic_window_s=6.0, panic_threshold=2.0,
    scale_down_delay_s=30.0,
)  # fmt: skip


def spec(**serverless: Any) -> ModelSpec:
    """A Model's spec with ``serverless`` fields (their JSON names)."""
    doc = {"backend": "reference", "source": "file:///m", "serverless": serverless}
    return ModelSpec.model_validate(doc)


class Engines:
    """What the engines' metrics pages say now (a URL missing: unreadable)."""

    def __init__(self) -> None:
        self.counts: dict[str, int | None] = {}
        self.reads = 0

    async def requests_in_flight(self, url: str) -> int | None:
        self.reads += 1
        return self.counts.get(url)


class Sim:
    """A ScaleOut on a manual clock, fed one reading per tick, deciding after each."""

    def __init__(self, model: ModelSpec, *, floor: int = 1, stored: int = 0) -> None:
        self.clock = ManualClock(1000.0)
        self.scaleout = ScaleOut(Engines(), clock=self.clock.now, policy=POLICY)
        self.spec = model
        self.floor = floor
        self.stored = stored
        self.ready = 1
        self.history: list[int] = []

    def run(self, concurrency: float | None, seconds: float) -> int:
        """Feed ``concurrency`` every tick for ``seconds`` (None: no page could be read);
        replicas follow the decision (as if each started at once); the last count."""
        for _ in range(round(seconds / POLICY.tick_s)):
            self.clock.advance(POLICY.tick_s)
            if concurrency is not None:
                self.scaleout.add(KEY, concurrency)
            decision = self.scaleout.decide(KEY, self.spec, self.floor, self.ready, self.stored)
            self.ready = self.stored = decision.replicas
            self.history.append(decision.replicas)
        return self.history[-1]


def changes(history: list[int]) -> int:
    """How many times the count changed."""
    return sum(a != b for a, b in itertools.pairwise(history))


def test_the_field_defaults_and_is_validated() -> None:
    assert spec().serverless_or_default.target_concurrency == DEFAULT_TARGET_CONCURRENCY == 16
    assert spec(targetConcurrency=3).serverless_or_default.target_concurrency == 3
    for bad in (0, -1):
        with pytest.raises(ValidationError, match="targetConcurrency"):
            spec(targetConcurrency=bad)
    assert not can_scale_out(spec())  # maxReplicas defaults to 1: existing manifests stay
    assert can_scale_out(spec(maxReplicas=2))
    assert not can_scale_out(spec(minReplicas=2, maxReplicas=2))


def test_a_steady_load_gets_ceil_of_its_average_over_the_target() -> None:
    sim = Sim(spec(maxReplicas=10, targetConcurrency=4))
    sim.ready = 3  # no burst against 3 ready replicas: the stable window decides
    assert sim.run(10.0, 120) == 3  # ceil(10 / 4)
    assert sim.run(12.0, 120) == 3  # exactly 3 x target: not a fourth
    decision = sim.scaleout.last(KEY)
    assert decision is not None
    assert decision.reason == "Stable"
    assert not decision.panic


def test_a_ramp_scales_up_without_waiting_for_the_delay() -> None:
    sim = Sim(spec(maxReplicas=10, targetConcurrency=2))
    counts = [sim.run(float(load), 20) for load in range(0, 21, 2)]
    assert counts == sorted(counts), counts  # up only, while the load only rises
    # The stable average trails a ramp by up to a window; each step still raises the count
    # in the step itself, not after the scale-down delay.
    assert counts[-1] >= 9, counts
    assert counts[5] >= 4, counts
    assert sim.run(20.0, 60) == 10  # 20 in flight, 2 each


def test_a_burst_panics_and_scales_up_within_the_panic_window() -> None:
    sim = Sim(spec(maxReplicas=8, targetConcurrency=2))
    sim.run(1.0, 120)
    assert sim.history[-1] == 1
    sim.run(12.0, 6)  # the stable average has barely moved; the panic window sees it
    assert sim.history[-1] == 6
    decision = sim.scaleout.last(KEY)
    assert decision is not None
    assert decision.panic
    assert decision.reason == "Panic"


def test_the_count_is_clamped_to_max_replicas() -> None:
    sim = Sim(spec(maxReplicas=2, targetConcurrency=1))
    assert sim.run(9.0, 120) == 2
    assert max(sim.history) == 2
    decision = sim.scaleout.last(KEY)
    assert decision is not None
    assert decision.reason == "AtMaxReplicas"
    assert decision.recommended == 9


def test_scale_down_waits_for_the_stable_window_and_the_delay() -> None:
    sim = Sim(spec(maxReplicas=4, targetConcurrency=2))
    assert sim.run(8.0, 120) == 4
    start = len(sim.history)
    sim.run(0.0, 200)
    after = sim.history[start:]
    # The stable average (60 s) falls below 3 x target after 15 s; then a 30 s delay.
    first_drop = next(i for i, n in enumerate(after) if n < 4) * POLICY.tick_s
    assert first_drop >= 45.0 - POLICY.tick_s, after
    assert after == sorted(after, reverse=True), after  # down only, step by step
    assert after[-1] == 1  # the idle rule's floor: it is still active


def test_a_load_at_a_boundary_does_not_flap() -> None:
    sim = Sim(spec(maxReplicas=6, targetConcurrency=4))
    sim.ready = 3
    sim.run(10.0, 120)
    start, recommended = len(sim.history), []
    for _ in range(20):  # 20 s at 5 in flight, 20 s at 11: the average wavers around 8
        for load in (5.0, 11.0):
            for _ in range(10):
                sim.run(load, POLICY.tick_s)
                decision = sim.scaleout.last(KEY)
                assert decision is not None
                recommended.append(decision.recommended)
    assert changes(recommended) > 20  # what the load alone asks for flips between 2 and 3
    assert changes(sim.history[start:]) <= 1, sim.history[start:]  # the count holds


def test_idle_goes_to_zero_and_starts_afresh() -> None:
    sim = Sim(spec(maxReplicas=4, targetConcurrency=1))
    assert sim.run(4.0, 60) == 4
    sim.floor = 0  # the idle timeout passed: the idle rule says zero
    assert sim.run(0.0, 2) == 0
    decision = sim.scaleout.last(KEY)
    assert decision is None
    sim.floor = 1  # the next request: one replica, not the four of the old window
    assert sim.run(0.0, 2) == 1


def test_min_replicas_is_the_floor_and_a_restart_holds_the_stored_count() -> None:
    model = spec(minReplicas=2, maxReplicas=5, targetConcurrency=2)
    sim = Sim(model, floor=2, stored=4)  # a new controller: status says 4 run
    sim.ready = 4
    assert sim.run(0.0, 20) == 4  # no reading says fewer for a whole delay yet
    assert sim.run(0.0, 60) == 2  # then the floor, never below it
    assert min(sim.history) == 2


def test_a_window_without_a_reading_holds_the_count() -> None:
    sim = Sim(spec(maxReplicas=4, targetConcurrency=2))
    assert sim.run(8.0, 60) == 4
    start = len(sim.history)
    sim.run(None, 200)  # unreadable pages for longer than the window and the delay
    assert set(sim.history[start:]) == {4}, sim.history[start:]
    decision = sim.scaleout.last(KEY)
    assert decision is not None
    assert (decision.reason, decision.concurrency) == ("NoMetrics", None)
    assert sim.run(0.0, 120) == 1  # readings again: an idle load scales it down


async def test_no_reading_adds_nothing_and_a_look_is_once_a_tick() -> None:
    clock = ManualClock(0.0)
    engines = Engines()
    scaleout = ScaleOut(engines, clock=clock.now, policy=POLICY)
    model = spec(maxReplicas=3, targetConcurrency=1)
    assert await scaleout.observe(KEY, ["http://a/metrics"]) is None  # unreadable
    assert scaleout.decide(KEY, model, 1, 1, 1).reason == "NoMetrics"
    clock.advance(POLICY.tick_s)
    engines.counts.update({"http://a/metrics": 2, "http://b/metrics": 1})
    urls = ["http://a/metrics", "http://b/metrics", "http://c/metrics"]
    assert await scaleout.observe(KEY, urls) == 3.0  # c unreadable: a + b
    reads = engines.reads
    assert await scaleout.observe(KEY, urls) is None  # within the tick: not read
    assert engines.reads == reads
    assert scaleout.decide(KEY, model, 1, 1, 1).replicas == 3


def test_status_tells_why() -> None:
    sim = Sim(spec(maxReplicas=2, targetConcurrency=1))
    sim.run(5.0, 10)
    now = datetime(2026, 1, 1, tzinfo=UTC)
    status = autoscaling_status(sim.scaleout.last(KEY), 1, None, now)
    assert status.reason == "AtMaxReplicas"
    assert status.last_scale_time == now
    assert status.recommended_replicas == 5
    assert status.target_concurrency == 1
    waiting = autoscaling_status(sim.scaleout.last(KEY), 1, status, None, "no free GPU")
    assert waiting.reason == "WaitingForGPU"
    assert "no free GPU" in (waiting.message or "")
    assert waiting.last_scale_time == now  # unchanged count: the time stays
    dumped = waiting.model_dump(mode="json", by_alias=True, exclude_none=True)
    assert dumped["targetConcurrency"] == 1
    assert dumped["recommendedReplicas"] == 5
