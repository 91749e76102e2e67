"""The SharedArbiter (core/sharing/arbiter.py) under scripted demand traces on a simulated
clock: the number and order of swaps, none inside a cooldown, each Model's longest wait,
and that nothing starves. No sleeps: the clock is a ManualClock."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from datetime import UTC, datetime

import pytest
from prometheus_client import CollectorRegistry

from flexinfer_common.api import Model
from flexinfer_common.api.operations import UNLOADED_AT_ANNOTATION
from flexinfer_common.api.status import GPUStatus, SharedGroupStatus
from flexinfer_common.bus.topics import ActivityEvent, DemandEvent
from flexinfer_controller.core.sharing import EngineChange, EngineKind, Hold
from flexinfer_controller.core.sharing.arbiter import SharedArbiter
from flexinfer_controller.core.sharing.clock import ManualClock
from flexinfer_controller.core.sharing.demand import DemandBook
from flexinfer_controller.core.sharing.metrics import SwapMetrics
from flexinfer_controller.core.sharing.policy import SwapPolicy, gpugroup_policy, shared_policy
from flexinfer_testing.sharing_trace import Trace, TraceModel, every

HOUR = 3600.0


def no_swap_inside_a_cooldown(trace: Trace, policy: SwapPolicy) -> None:
    """Every loser had held the GPU, without a break, at least its swap cooldown."""
    for swap in (s.swap for s in trace.swaps):
        for loser in (k.split("/")[1] for k in swap.losers):
            held = [at for at, running in trace.timeline if at < swap.at]
            start = swap.at
            for at in reversed(held):
                if loser not in dict(trace.timeline)[at]:
                    break
                start = at
            assert swap.at - start >= policy.swap_cooldown_s, (swap, start)


async def test_alternating_demand_every_30s_swaps_only_at_the_aging_period() -> None:
    policy = shared_policy()
    trace = Trace([TraceModel("a"), TraceModel("b")], policy)
    a, b = every(60.0), every(60.0, 30.0)
    await trace.run(HOUR, lambda t: [n for n, due in (("a", a), ("b", b)) if due(t)])
    assert trace.order() == [
        (630.0, "b", ("a",), "aging"),
        (1230.0, "a", ("b",), "aging"),
        (1830.0, "b", ("a",), "aging"),
        (2430.0, "a", ("b",), "aging"),
        (3030.0, "b", ("a",), "aging"),
    ]
    no_swap_inside_a_cooldown(trace, policy)
    assert max(trace.max_wait("a"), trace.max_wait("b")) <= policy.starvation_s


async def test_alternating_demand_of_models_that_fit_together_never_swaps() -> None:
    policy = shared_policy()
    members = [TraceModel("a", vram_mb=9000), TraceModel("b", vram_mb=9000)]
    trace = Trace(members, policy, budget_mb=24576)
    a, b = every(60.0), every(60.0, 30.0)
    await trace.run(HOUR, lambda t: [n for n, due in (("a", a), ("b", b)) if due(t)])
    assert trace.swaps == []
    assert trace.max_wait("a") == 0.0
    assert trace.max_wait("b") == 0.0


async def test_a_burst_against_a_pinned_model_evicts_the_others_lru_never_it() -> None:
    policy = shared_policy()
    members = [
        TraceModel("pinned", priority=1, vram_mb=8000, pinned=True),
        TraceModel("a", vram_mb=8000),
        TraceModel("b", vram_mb=8000),
        TraceModel("burst", priority=900, vram_mb=8000),
    ]
    trace = Trace(members, policy, budget_mb=24000)
    hot = every(60.0)

    def demand(t: float) -> Sequence[str]:
        names = ["pinned"] * hot(t) + ["a"] * (t in (0, 200, 380)) + ["b"] * (t in (0, 210, 390))
        return names + ["burst"] * 5 * (400.0 <= t < 460.0)

    await trace.run(1200.0, demand)
    # Three fit; the burst needs room: a is the least recently used but the pinned Model.
    assert trace.order() == [(400.0, "burst", ("a",), "priority")]
    assert all("pinned" in running for _, running in trace.timeline)
    assert trace.max_wait("burst") == 0.0


async def test_three_models_priorities_10_5_5_round_robin_within_the_bound() -> None:
    policy = shared_policy()
    members = [TraceModel("h", 10), TraceModel("l1", 5), TraceModel("l2", 5)]
    trace = Trace(members, policy)
    await trace.run(HOUR, lambda t: ["h", "l1", "l2"] if t % 10 == 0 else [])
    assert trace.order()[:4] == [
        (600.0, "l1", ("h",), "aging"),
        (900.0, "l2", ("l1",), "aging"),
        (1200.0, "h", ("l2",), "priority"),
        (1500.0, "l1", ("h",), "aging"),
    ]
    assert len(trace.swaps) == 10
    no_swap_inside_a_cooldown(trace, policy)
    bound = policy.starvation_s + policy.swap_cooldown_s
    assert trace.max_wait("h") == 600.0
    assert all(trace.max_wait(n) <= bound for n in ("h", "l1", "l2"))
    assert all(trace.waits.get(n) for n in ("h", "l1", "l2"))  # each was served


async def test_a_lower_priority_under_constant_higher_demand_gets_the_gpu_by_aging() -> None:
    policy = shared_policy()
    trace = Trace([TraceModel("h", 100), TraceModel("l", 10)], policy)
    await trace.run(HOUR, lambda t: ["h", "l"] if t % 10 == 0 else [])
    assert [(at, w, r) for at, w, _, r in trace.order()] == [
        (600.0, "l", "aging"),
        (900.0, "h", "priority"),
        (1500.0, "l", "aging"),
        (1800.0, "h", "priority"),
        (2400.0, "l", "aging"),
        (2700.0, "h", "priority"),
        (3300.0, "l", "aging"),
    ]
    no_swap_inside_a_cooldown(trace, policy)
    assert trace.max_wait("l") == policy.starvation_s
    assert trace.max_wait("h") == policy.swap_cooldown_s


async def test_without_aging_the_lower_priority_starves_as_in_the_seed() -> None:
    policy = shared_policy(starvation_s=0.0)
    trace = Trace([TraceModel("h", 100), TraceModel("l", 10)], policy)
    await trace.run(HOUR, lambda t: ["h", "l"] if t % 10 == 0 else [])
    assert trace.swaps == []
    assert "l" not in trace.waits


async def test_gpugroup_policy_threshold_hysteresis_and_preemption_cooldown() -> None:
    policy = gpugroup_policy(demand_window_s=20.0)
    trace = Trace([TraceModel("a", 100), TraceModel("b", 200)], policy, step_s=1.0)

    def demand(t: float) -> Sequence[str]:
        names = ["a"] if t == 0 else []
        names += ["b"] * (t in (40.0, 41.0))  # two queued: under the threshold of 3
        names += ["b"] * (t == 45.0)  # the third: b's queue (since 40) persisted 10 s at 50
        return names + ["a"] * 3 * (t == 61.0)

    await trace.run(200.0, demand)
    # b wins at 50 (a ran its 30 s and is idle); a's queue could preempt the idle b from
    # 71 (hysteresis) and b ran its 30 s at 80, but a's preemption cooldown ends at 110.
    assert trace.order() == [(50.0, "b", ("a",), "idle"), (110.0, "a", ("b",), "idle")]


def model(name: str, priority: int, group: str | None = "g") -> Model:
    """A Model of shared group ``group``."""
    gpu: dict[str, object] = {"vendor": "nvidia", "priority": priority}
    if group is not None:
        gpu["shared"] = group
    return Model.model_validate(
        {
            "apiVersion": "ai.flexinfer/v1alpha2",
            "kind": "Model",
            "metadata": {"name": name, "namespace": "d"},
            "spec": {"backend": "reference", "source": "file:///m", "gpu": gpu},
        }
    )


GPU = GPUStatus(node="n1", device="0", vendor="nvidia", memory_mb=24576)


@pytest.fixture
def parts() -> tuple[ManualClock, list[str]]:
    """A clock at 0 and the list of requeued Model keys."""
    return ManualClock(), []


async def test_verdicts_say_who_holds_the_gpu_and_losers_are_requeued(
    parts: tuple[ManualClock, list[str]],
) -> None:
    clock, requeued = parts
    lo, hi = model("lo", 1), model("hi", 9)

    async def members(group: str) -> list[Model]:
        return [lo, hi] if group == "g" else []

    book = DemandBook(clock)
    arbiter = SharedArbiter(
        clock=clock, demand=book, policy=shared_policy(), members=members, requeue=requeued.append
    )
    assert (await arbiter.arbitrate(lo, GPU, 1)).replicas == 1
    clock.advance(10)
    book.queued("d/hi", 1, "p")  # hi cannot even be placed yet: it is known from the store
    waiting = await arbiter.arbitrate(lo, GPU, 1)
    # lo holds (its cooldown ends at 300) and looks again then, for hi's sake.
    assert waiting.replicas == 1
    assert waiting.recheck_s is not None
    assert 290.0 < waiting.recheck_s < 290.1  # granted at 0, + the 300 s cooldown
    clock.advance(300)
    book.queued("d/hi", 2, "p")  # the proxy repeats its queue
    lost = await arbiter.arbitrate(lo, GPU, 1)
    assert lost.replicas == 0
    assert lost.verdict is not None
    assert lost.verdict.hold is Hold.PREEMPTED
    assert "preempted by d/hi" in lost.verdict.message
    assert requeued == ["d/hi"]
    assert arbiter.holders("g") == ["d/hi"]
    assert (await arbiter.arbitrate(hi, GPU, 1)).replicas == 1


async def test_a_model_without_a_group_runs_what_it_wants(
    parts: tuple[ManualClock, list[str]],
) -> None:
    clock, _ = parts
    arbiter = SharedArbiter(clock=clock, demand=DemandBook(clock))
    assert (await arbiter.arbitrate(model("solo", 5, None), GPU, 3)).replicas == 3


async def test_a_queued_member_is_told_so_and_when_to_look_again(
    parts: tuple[ManualClock, list[str]],
) -> None:
    clock, _ = parts
    arbiter = SharedArbiter(clock=clock, demand=DemandBook(clock))
    a, b = model("a", 5), model("b", 5)
    await arbiter.arbitrate(a, GPU, 1)
    queued = await arbiter.arbitrate(b, GPU, 1)
    assert queued.replicas == 0
    assert queued.verdict is not None
    assert queued.verdict.hold is Hold.QUEUED
    assert queued.verdict.reason == "WaitingForGPU"
    assert queued.recheck_s is not None
    assert queued.recheck_s > 0
    arbiter.forget("d/a")
    clock.advance(1)
    assert (await arbiter.arbitrate(b, GPU, 1)).replicas == 1  # a deleted holder frees it


def queued(key: str, depth: int = 1) -> DemandEvent:
    """A proxy's DemandEvent for ``key``."""
    return DemandEvent(model=key, queue_depth=depth, since=datetime.now(UTC), proxy="p")


async def test_queued_demand_makes_the_group_holders_decide_again(
    parts: tuple[ManualClock, list[str]],
) -> None:
    clock, requeued = parts
    a, b, c = model("a", 5), model("b", 5), model("c", 5, "other")

    async def members(group: str) -> list[Model]:
        return [m for m in (a, b, c) if m.spec.gpu_or_default.shared == group]

    book = DemandBook(clock)
    arbiter = SharedArbiter(clock=clock, demand=book, members=members, requeue=requeued.append)
    arbiter.observe(queued("d/x"), "d/x")
    assert requeued == []  # no group holds anything yet
    await arbiter.arbitrate(a, GPU, 1)
    await arbiter.arbitrate(c, GPU, 1)
    arbiter.observe(queued("d/b", 0), "d/b")
    arbiter.observe(ActivityEvent(model="d/b", at=datetime.now(UTC), active=1), "d/b")
    assert requeued == []  # nothing waits: no decision changes
    arbiter.observe(queued("d/b"), "d/b")  # b, unplaced, is known from a's group's listing
    assert requeued == ["d/a"]
    assert book.queue("d/b", 60.0) is not None
    requeued.clear()
    arbiter.observe(queued("d/x"), "d/x")  # of no group known yet: every group's holders
    assert requeued == ["d/a", "d/c"]


async def test_a_deleted_member_makes_the_rest_of_its_group_decide_again(
    parts: tuple[ManualClock, list[str]],
) -> None:
    clock, requeued = parts
    arbiter = SharedArbiter(clock=clock, demand=DemandBook(clock), requeue=requeued.append)
    a, b = model("a", 5), model("b", 5)
    await arbiter.arbitrate(a, GPU, 1)
    assert (await arbiter.arbitrate(b, GPU, 1)).replicas == 0
    arbiter.forget("d/a")
    assert requeued == ["d/b"]  # b waits for the GPU a held, and may not be reconciled
    assert (await arbiter.arbitrate(b, GPU, 1)).replicas == 1


WALL = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float:
    """A sample's value on ``registry`` (0 when it has none yet)."""
    return registry.get_sample_value(name, labels) or 0.0


async def test_a_swap_that_fails_falls_back_and_the_swaps_are_counted_and_timed(
    parts: tuple[ManualClock, list[str]],
) -> None:
    clock, requeued = parts
    registry = CollectorRegistry()
    lo, hi = model("lo", 1), model("hi", 9)

    async def members(group: str) -> list[Model]:
        return [lo, hi]

    book = DemandBook(clock)
    arbiter = SharedArbiter(
        clock=clock,
        demand=book,
        members=members,
        requeue=requeued.append,
        metrics=SwapMetrics(registry, clock.now),
        wall=lambda: WALL,
    )
    held = await arbiter.arbitrate(lo, GPU, 1)
    assert held.group == SharedGroupStatus(group_name="g", state="Active")
    clock.advance(300)
    book.served("d/lo")  # lo is busy: only hi's priority takes the GPU from it
    book.queued("d/hi", 1, "p")
    lost = await arbiter.arbitrate(lo, GPU, 1)
    assert lost.verdict is not None
    assert lost.verdict.drain_s == 30.0  # the loser drains for the policy's grace
    assert lost.group == SharedGroupStatus(
        group_name="g", state="Preempted", queue_position=1, preempted_by="d/hi", preempted_at=WALL
    )
    swaps = "flexinfer_controller_gpu_swaps_total"
    assert sample(registry, swaps, group="g", reason="priority") == 1.0

    # hi cannot be placed while lo's engine drains and stops: its status says so.
    taking = await arbiter.arbitrate(hi, GPUStatus(), 1)
    assert taking.replicas == 1
    assert taking.verdict is not None
    assert (taking.verdict.hold, taking.verdict.reason) == (Hold.QUEUED, "WaitingForSwap")
    assert "waiting for d/lo to finish its running requests (up to 30s)" in taking.verdict.message

    # hi's engine crashes while loading: lo gets the GPU back at once, hi waits its backoff.
    requeued.clear()
    arbiter.engine_event(EngineChange("d/hi", "hi-1", 1, EngineKind.CRASHED, backoff_s=5.0))
    assert "d/lo" in requeued
    back = await arbiter.arbitrate(lo, GPU, 1)
    assert (back.replicas, back.group) == (1, SharedGroupStatus(group_name="g", state="Active"))
    assert sample(registry, swaps, group="g", reason="fallback") == 1.0
    waits = await arbiter.arbitrate(hi, GPU, 1)
    assert waits.replicas == 0
    assert waits.verdict is not None
    assert "crashed while loading: it claims the GPU again in 5.0s" in waits.verdict.message
    assert waits.group == SharedGroupStatus(group_name="g", state="Queued", queue_position=1)
    assert waits.recheck_s is not None
    assert 5.0 < waits.recheck_s < 5.1

    # Its backoff over, hi (still queued) preempts again: lo kept no fresh cooldown.
    clock.advance(5.1)
    book.served("d/lo")
    book.queued("d/hi", 1, "p")
    assert (await arbiter.arbitrate(hi, GPU, 1)).replicas == 1
    assert sample(registry, swaps, group="g", reason="priority") == 2.0
    clock.advance(2.0)
    arbiter.engine_event(EngineChange("d/hi", "hi-2", 1, EngineKind.READY, took_s=1.5))
    steps = "flexinfer_controller_gpu_swap_step_seconds_sum"
    assert sample(registry, steps, group="g", step="start") == 1.5
    assert sample(registry, "flexinfer_controller_gpu_swap_seconds_sum", group="g") == 2.0


async def test_a_restarted_arbiter_keeps_the_holder_its_predecessor_wrote_in_status(
    parts: tuple[ManualClock, list[str]],
) -> None:
    clock, requeued = parts
    a, b = model("a", 5), model("b", 5)
    a.status.shared_group = SharedGroupStatus(group_name="g", state="Active")
    b.status.shared_group = SharedGroupStatus(
        group_name="g", state="Preempted", queue_position=1, preempted_by="d/a"
    )

    async def members(group: str) -> list[Model]:
        return [a, b]

    book = DemandBook(clock)
    book.queued("d/b", 1, "p")  # b's requests queue; a, of equal priority, is busy
    book.served("d/a")
    arbiter = SharedArbiter(clock=clock, demand=book, members=members, requeue=requeued.append)
    # b is reconciled first after the restart: the GPU is a's engine's, so b waits.
    first = await arbiter.arbitrate(b, GPU, 1)
    assert first.replicas == 0
    assert first.verdict is not None
    assert first.verdict.hold is Hold.PREEMPTED
    assert (await arbiter.arbitrate(a, GPU, 1)).replicas == 1
    assert arbiter.holders("g") == ["d/a"]
    assert arbiter.swaps == deque()


async def test_an_unload_drops_the_demand_reported_before_it(
    parts: tuple[ManualClock, list[str]],
) -> None:
    clock, requeued = parts
    a = model("a", 5)

    async def members(group: str) -> list[Model]:
        return [a]

    book = DemandBook(clock)
    arbiter = SharedArbiter(clock=clock, demand=book, members=members, requeue=requeued.append)
    book.queued("d/a", 1, "p")  # the cold start's queue report, still within its window
    assert (await arbiter.arbitrate(a, GPU, 1)).replicas == 1
    a.metadata.annotations[UNLOADED_AT_ANNOTATION] = "2026-01-02T03:04:05Z"
    assert (await arbiter.arbitrate(a, GPU, 0)).replicas == 0  # the report kept it before
    assert arbiter.holders("g") == []
    book.queued("d/a", 1, "p")  # a request after the unload brings it back
    assert (await arbiter.arbitrate(a, GPU, 0)).replicas == 1


async def test_a_sleep_swap_times_the_sleep_and_the_wake_instead_of_stop_and_start(
    parts: tuple[ManualClock, list[str]],
) -> None:
    clock, requeued = parts
    registry = CollectorRegistry()
    metrics = SwapMetrics(registry, clock.now)
    lo, hi = model("lo", 1), model("hi", 9)

    async def members(group: str) -> list[Model]:
        return [lo, hi]

    book = DemandBook(clock)
    arbiter = SharedArbiter(
        clock=clock, demand=book, members=members, requeue=requeued.append, metrics=metrics
    )
    await arbiter.arbitrate(lo, GPU, 1)
    clock.advance(300)
    book.queued("d/hi", 1, "p")
    assert (await arbiter.arbitrate(lo, GPU, 1)).replicas == 0
    metrics.stopping("g", "lo-1")  # drained: the drainer hands the engine on
    arbiter.engine_event(EngineChange("d/lo", "lo-1", 1, EngineKind.SLEPT, took_s=0.25))
    # A sleep is no engine start or readiness: hi's swap still waits for hi's engine.
    assert (await arbiter.arbitrate(hi, GPU, 1)).replicas == 1
    arbiter.engine_event(EngineChange("d/hi", "hi-1", 1, EngineKind.READY, took_s=0.1, woken=True))
    steps = "flexinfer_controller_gpu_swap_step_seconds_sum"
    assert sample(registry, steps, group="g", step="sleep") == 0.25
    assert sample(registry, steps, group="g", step="wake") == 0.1
    assert sample(registry, steps, group="g", step="stop") == 0.0
    assert sample(registry, steps, group="g", step="start") == 0.0


async def test_a_crash_looping_holder_leaves_the_gpu_until_its_spec_changes(
    parts: tuple[ManualClock, list[str]],
) -> None:
    clock, requeued = parts
    a, b = model("a", 9), model("b", 1)

    async def members(group: str) -> list[Model]:
        return [a, b]

    arbiter = SharedArbiter(
        clock=clock, demand=DemandBook(clock), members=members, requeue=requeued.append
    )
    assert (await arbiter.arbitrate(a, GPU, 1)).replicas == 1
    assert (await arbiter.arbitrate(b, GPU, 1)).replicas == 0
    requeued.clear()
    arbiter.engine_event(EngineChange("d/a", "a-1", 1, EngineKind.CRASHED, backoff_s=float("inf")))
    assert requeued == ["d/b"]
    clock.advance(1)
    assert (await arbiter.arbitrate(b, GPU, 1)).replicas == 1
    assert arbiter.holders("g") == ["d/b"]
    waits = await arbiter.arbitrate(a, GPU, 1)
    assert waits.verdict is not None
    assert "once its spec changes" in waits.verdict.message
    fixed = a.model_copy(update={"metadata": a.metadata.model_copy(update={"generation": 2})})
    clock.advance(1)
    queued = await arbiter.arbitrate(fixed, GPU, 1)  # b holds it now; a waits for it again
    assert queued.verdict is not None
    assert "crashed" not in queued.verdict.message


async def test_shared_group_status_tells_each_members_state_and_place_in_line(
    parts: tuple[ManualClock, list[str]],
) -> None:
    clock, _ = parts
    a, b, c, idle = model("a", 5), model("b", 5), model("c", 5), model("idle", 5)
    arbiter = SharedArbiter(clock=clock, demand=DemandBook(clock))
    assert (await arbiter.arbitrate(a, GPU, 1)).group == SharedGroupStatus(
        group_name="g", state="Active"
    )
    clock.advance(1)
    first = await arbiter.arbitrate(b, GPU, 1)
    clock.advance(1)
    second = await arbiter.arbitrate(c, GPU, 1)
    assert first.group == SharedGroupStatus(group_name="g", state="Queued", queue_position=1)
    assert second.group == SharedGroupStatus(group_name="g", state="Queued", queue_position=2)
    assert second.verdict is not None
    assert "(1 ahead)" in second.verdict.message
    assert second.verdict.drain_s == 0.0  # only a preempted member's engines drain
    none = await arbiter.arbitrate(idle, GPU, 0)
    assert (none.replicas, none.verdict) == (0, None)
    assert none.group == SharedGroupStatus(group_name="g", state="Idle")
