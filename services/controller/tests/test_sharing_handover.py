"""A swap's winner starts only once its losers' engines are gone or asleep
(core/sharing/handover.py), on the real arbiter and a simulated clock: its answer names the
losers to wait for, ``hand_over`` holds it at 0 replicas while the runtime says one still
holds the GPU, and a loser's engine stopping or sleeping reconciles the winner at once."""

from __future__ import annotations

from flexinfer_common.api import Model
from flexinfer_common.api.status import GPUStatus
from flexinfer_controller.core.sharing import EngineChange, EngineKind, Hold, Sharing
from flexinfer_controller.core.sharing.arbiter import SharedArbiter
from flexinfer_controller.core.sharing.clock import ManualClock
from flexinfer_controller.core.sharing.demand import DemandBook
from flexinfer_controller.core.sharing.handover import RECHECK_S, hand_over

GPU = GPUStatus(node="n1", device="0", vendor="nvidia", memory_mb=24576)


def model(name: str, priority: int) -> Model:
    """A member of shared group ``g`` that fills the GPU alone."""
    gpu = {"vendor": "nvidia", "priority": priority, "shared": "g", "vramEstimateMB": 16000}
    return Model.model_validate(
        {
            "apiVersion": "ai.flexinfer/v1alpha2",
            "kind": "Model",
            "metadata": {"name": name, "namespace": "d"},
            "spec": {"backend": "reference", "source": "file:///m", "gpu": gpu},
        }
    )


def test_hand_over_changes_nothing_without_losers_or_once_they_freed_the_gpu() -> None:
    plain = Sharing(1)
    assert hand_over(plain, lambda key: True) is plain
    won = Sharing(1, waits_for=frozenset({"d/lo"}))
    assert hand_over(won, lambda key: False) is won
    idle = Sharing(0, waits_for=frozenset({"d/lo"}))
    assert hand_over(idle, lambda key: True) is idle


def test_hand_over_holds_the_winner_while_a_loser_still_holds_the_gpu() -> None:
    won = Sharing(1, recheck_s=300.0, waits_for=frozenset({"d/a", "d/b"}))
    held = hand_over(won, lambda key: key == "d/b")
    assert held.replicas == 0
    assert held.recheck_s == RECHECK_S  # the backstop, sooner than the arbiter's recheck
    assert held.verdict is not None
    assert (held.verdict.hold, held.verdict.reason) == (Hold.QUEUED, "WaitingForSwap")
    assert "waiting for the engines of d/b to drain and stop (or sleep)" in held.verdict.message


async def test_the_winner_waits_for_its_loser_and_is_reconciled_when_it_goes() -> None:
    clock, requeued = ManualClock(), list[str]()
    book = DemandBook(clock)
    lo, hi = model("lo", 1), model("hi", 9)

    async def members(group: str) -> list[Model]:
        return [lo, hi]

    arbiter = SharedArbiter(clock=clock, demand=book, members=members, requeue=requeued.append)
    assert (await arbiter.arbitrate(lo, GPU, 1)).replicas == 1
    clock.advance(300)
    book.served("d/lo")
    book.queued("d/hi", 1, "p")
    assert (await arbiter.arbitrate(lo, GPU, 1)).replicas == 0  # preempted
    won = await arbiter.arbitrate(hi, GPU, 1)
    assert (won.replicas, won.waits_for) == (1, frozenset({"d/lo"}))
    assert hand_over(won, lambda key: key == "d/lo").replicas == 0
    for kind in (EngineKind.STOPPED, EngineKind.SLEPT):  # lo's engine freed the GPU
        requeued.clear()
        arbiter.engine_event(EngineChange("d/lo", "lo-1", 1, kind))
        assert requeued == ["d/hi"]
    arbiter.engine_event(EngineChange("d/hi", "hi-1", 1, EngineKind.READY, took_s=1.0))
    served = await arbiter.arbitrate(hi, GPU, 1)
    assert (served.replicas, served.waits_for) == (1, frozenset())  # its swap is settled
