"""The drain of a swap's loser (core/sharing/drain.py) on a simulated clock: a preempted
Model's engines keep running while they hold requests, up to the verdict's grace; the
reconcile never waits for them, it is told when to look again."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from flexinfer_controller.adapters.metrics.http import in_flight_from_text
from flexinfer_controller.core.sharing import Hold, SharedVerdict
from flexinfer_controller.core.sharing.clock import ManualClock
from flexinfer_controller.core.sharing.drain import Drainer
from flexinfer_controller.core.sharing.metrics import SwapMetrics
from flexinfer_controller.runtime import Replica, ReplicaState

KEY = "d/lo"
HELD = SharedVerdict(Hold.PREEMPTED, "Preempted", "preempted by d/hi", drain_s=30.0, group="g")


class Engines:
    """What each engine's metrics page says it holds now (a URL missing: unreadable)."""

    def __init__(self) -> None:
        self.counts: dict[str, int | None] = {}
        self.read: list[str] = []

    async def requests_in_flight(self, url: str) -> int | None:
        self.read.append(url)
        return self.counts.get(url)


def replica(rid: str, state: ReplicaState = ReplicaState.READY) -> Replica:
    url = f"http://{rid}" if state is ReplicaState.READY else None
    return Replica(rid, KEY, 1, state, url=url)


Setup = tuple[ManualClock, Engines, list[tuple[str, float]], CollectorRegistry, Drainer]


def drainer_on_a_manual_clock(grace_s: float = 0.0) -> Setup:
    """A Drainer polling every 0.5 s, the clock, engines, requeues and metrics it uses."""
    clock, engines, requeued, registry = ManualClock(), Engines(), [], CollectorRegistry()
    drainer = Drainer(
        in_flight=engines,
        clock=clock,
        requeue=lambda key, delay: requeued.append((key, delay)),
        metrics=SwapMetrics(registry, clock.now),
        poll_s=0.5,
        grace_s=grace_s,
    )
    return clock, engines, requeued, registry, drainer


@pytest.fixture
def setup() -> Setup:
    return drainer_on_a_manual_clock()


async def test_an_engine_with_requests_drains_until_they_end(setup: Setup) -> None:
    clock, engines, requeued, registry, drainer = setup
    r = replica("r1")
    engines.counts["http://r1/metrics"] = 2
    assert await drainer.hold_back(KEY, HELD, [r], "/metrics") == ([], {"r1"})
    assert requeued == [(KEY, 0.51)]
    assert drainer.draining(KEY) == ["r1"]
    clock.advance(4.0)
    engines.counts["http://r1/metrics"] = 0
    assert await drainer.hold_back(KEY, HELD, [r], "/metrics") == ([r], set())
    assert drainer.draining(KEY) == []
    result = drainer.results[-1]
    assert (result.seconds, result.timed_out, result.in_flight) == (4.0, False, 0)
    drains = {"group": "g", "step": "drain"}
    assert registry.get_sample_value("flexinfer_controller_gpu_swap_step_seconds_sum", drains) == 4
    assert registry.get_sample_value("flexinfer_controller_gpu_swap_drain_timeouts_total") is None


async def test_a_drain_longer_than_the_grace_is_cut_off_at_it(setup: Setup) -> None:
    clock, engines, requeued, registry, drainer = setup
    r = replica("r1")
    engines.counts["http://r1/metrics"] = 1
    await drainer.hold_back(KEY, HELD, [r], "/metrics")
    clock.advance(29.8)
    assert await drainer.hold_back(KEY, HELD, [r], "/metrics") == ([], {"r1"})
    assert requeued[-1][1] == pytest.approx(0.21)  # the grace's end, not a whole poll later
    clock.advance(0.21)
    assert await drainer.hold_back(KEY, HELD, [r], "/metrics") == ([r], set())
    assert drainer.results[-1].timed_out
    timeouts = registry.get_sample_value(
        "flexinfer_controller_gpu_swap_drain_timeouts_total", {"group": "g"}
    )
    assert timeouts == 1.0


async def test_an_unreadable_engine_is_waited_for_until_its_grace(setup: Setup) -> None:
    clock, _, _, _, drainer = setup
    r = replica("r1")
    assert await drainer.hold_back(KEY, HELD, [r], "/metrics") == ([], {"r1"})
    clock.advance(30.0)
    assert await drainer.hold_back(KEY, HELD, [r], "/metrics") == ([r], set())
    assert drainer.results[-1].in_flight is None


async def test_what_serves_nothing_or_cannot_tell_stops_at_once(setup: Setup) -> None:
    _, engines, requeued, _, drainer = setup
    starting = replica("r0", ReplicaState.STARTING)
    ready = replica("r1")
    engines.counts["http://r1/metrics"] = 3
    assert await drainer.hold_back(KEY, HELD, [starting], "/metrics") == ([starting], set())
    assert await drainer.hold_back(KEY, None, [ready], "/metrics") == ([ready], set())
    assert await drainer.hold_back(KEY, HELD, [ready], None) == ([ready], set())
    immediate = SharedVerdict(Hold.PREEMPTED, "Preempted", "m", drain_s=0.0, group="g")
    assert await drainer.hold_back(KEY, immediate, [ready], "/metrics") == ([ready], set())
    assert (requeued, engines.read) == ([], [])


async def test_an_engine_that_keeps_the_gpu_after_all_ends_its_drain(setup: Setup) -> None:
    _, engines, _, _, drainer = setup
    r = replica("r1")
    engines.counts["http://r1/metrics"] = 1
    await drainer.hold_back(KEY, HELD, [r], "/metrics")
    assert await drainer.hold_back(KEY, None, [], "/metrics") == ([], set())  # it holds again
    assert drainer.draining(KEY) == []


async def test_a_stop_that_is_no_swap_drains_for_the_drainers_own_grace() -> None:
    """A scale-in or a rollout: the drainer's grace, no swap metrics."""
    clock, engines, requeued, registry, drainer = drainer_on_a_manual_clock(grace_s=10.0)
    r = replica("r1")
    engines.counts["http://r1/metrics"] = 1
    assert await drainer.hold_back(KEY, None, [r], "/metrics") == ([], {"r1"})
    clock.advance(9.9)
    assert await drainer.hold_back(KEY, None, [r], "/metrics") == ([], {"r1"})
    assert requeued[-1][1] == pytest.approx(0.11)  # cut off at the grace's end
    clock.advance(0.1)
    assert await drainer.hold_back(KEY, None, [r], "/metrics") == ([r], set())
    result = drainer.results[-1]
    assert (result.seconds, result.timed_out, result.in_flight) == (10.0, True, 1)
    swap_steps = "flexinfer_controller_gpu_swap_step_seconds_count"
    assert registry.get_sample_value(swap_steps, {"group": "", "step": "drain"}) is None
    # An engine whose page cannot tell stops at once, unless a swap drains it.
    engines.counts.pop("http://r1/metrics")
    assert await drainer.hold_back(KEY, None, [r], "/metrics") == ([r], set())
    assert drainer.results[-1].in_flight is None
    # A swap's own grace still wins over the drainer's.
    engines.counts["http://r1/metrics"] = 1
    await drainer.hold_back(KEY, HELD, [r], "/metrics")
    clock.advance(10.0)
    assert await drainer.hold_back(KEY, HELD, [r], "/metrics") == ([], {"r1"})


def test_in_flight_is_the_sum_of_running_and_waiting_gauges() -> None:
    vllm = (
        'vllm:num_requests_running{model_name="m"} 2.0\n'
        'vllm:num_requests_waiting{model_name="m"} 1.0\n'
        'vllm:gpu_cache_usage_perc{model_name="m"} 0.5\n'
    )
    assert in_flight_from_text(vllm) == 3
    ours = "flexinfer_engine_num_requests_running 0.0\nflexinfer_engine_num_requests_waiting 0.0\n"
    assert in_flight_from_text(ours) == 0
    assert in_flight_from_text("other_metric 4.0\n") is None
    assert in_flight_from_text("{{{ not prometheus") is None
