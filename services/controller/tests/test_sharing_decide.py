"""The pure shared-GPU decision (core/sharing/decide.py): co-residency, pinning, LRU,
the priority gate, cooldowns and aging, on given times."""

from __future__ import annotations

from flexinfer_controller.core.sharing.decide import GroupState, Member, decide
from flexinfer_controller.core.sharing.demand import Queue
from flexinfer_controller.core.sharing.policy import shared_policy

POLICY = shared_policy()


def member(key: str, priority: int = 100, **kw: object) -> Member:
    """A member wanting the GPU, with requests waiting since ``since`` when given."""
    since = kw.pop("since", None)
    queue = Queue(1, float(since)) if isinstance(since, (int, float)) else None
    last = kw.pop("last", since)
    return Member(key, priority, queue=queue, last_demand=last, wants=True, **kw)  # type: ignore[arg-type]


def test_a_group_at_zero_gives_the_gpu_at_once_to_the_best_claimant() -> None:
    state = GroupState()
    members = {m.key: m for m in (member("a", 5, since=0), member("b", 10, since=0))}
    out = decide(members, state, POLICY, None, 0.0)
    assert out.granted == ("b",)
    assert out.swaps == ()
    assert list(state.residents) == ["b"]
    assert list(state.waiting) == ["a"]


def test_members_that_fit_in_the_vram_budget_all_stay_up() -> None:
    state = GroupState()
    members = {k: member(k, since=0, vram_mb=8000) for k in ("a", "b", "c")}
    out = decide(members, state, POLICY, 24000, 0.0)
    assert out.granted == ("a", "b", "c")
    assert out.swaps == ()


def test_an_unknown_estimate_needs_the_gpu_alone() -> None:
    state = GroupState()
    members = {"a": member("a", since=0, vram_mb=8000), "b": member("b", since=0)}
    assert decide(members, state, POLICY, 24000, 0.0).granted == ("a",)


def test_short_vram_evicts_least_recently_used_and_never_the_pinned() -> None:
    state = GroupState(residents={"p": 0.0, "a": 0.0, "b": 0.0})
    members = {
        "p": member("p", 1, vram_mb=8000, pinned=True, last=0.0),
        "a": member("a", 1, vram_mb=8000, last=350.0),
        "b": member("b", 1, vram_mb=8000, last=340.0),
        "c": member("c", 500, vram_mb=8000, since=400),
    }
    out = decide(members, state, POLICY, 24000, 400.0)
    assert out.swaps[0].losers == ("b",)
    assert out.swaps[0].reason == "priority"
    assert set(state.residents) == {"p", "a", "c"}
    assert state.preempted["b"] == (400.0, "c")


def test_a_busy_holder_of_equal_priority_is_not_preempted_an_idle_one_is() -> None:
    state = GroupState(residents={"a": 0.0})
    members = {"a": member("a", since=350), "b": member("b", since=400)}
    assert decide(members, state, POLICY, None, 400.0).swaps == ()
    idle = {"a": member("a", last=100.0), "b": member("b", since=400)}
    out = decide(idle, state, POLICY, None, 400.0)
    assert [(s.winner, s.reason) for s in out.swaps] == [("b", "idle")]


def test_the_swap_cooldown_protects_the_winner_and_says_when_it_ends() -> None:
    state = GroupState(residents={"a": 100.0})
    members = {"a": member("a", 1, since=100), "b": member("b", 9, since=200)}
    out = decide(members, state, POLICY, None, 200.0)
    # First gate: a turns idle at 220 (last demand 100 + the 2 min window).
    assert out.swaps == ()
    assert out.recheck_s is not None
    assert 20.0 < out.recheck_s < 20.1
    later = decide(members, state, POLICY, None, 220.1)
    assert later.swaps == ()
    assert later.recheck_s is not None
    assert 179.9 < later.recheck_s < 180.0  # then a's cooldown: granted at 100, + 300 s
    assert decide(members, state, POLICY, None, 400.0).swaps[0].winner == "b"


def test_a_models_own_swap_cooldown_overrides_the_policy() -> None:
    state = GroupState(residents={"a": 0.0})
    members = {"a": member("a", 1, since=0, cooldown_s=30.0), "b": member("b", 9, since=10)}
    assert decide(members, state, POLICY, None, 29.0).swaps == ()
    assert decide(members, state, POLICY, None, 30.0).swaps[0].winner == "b"


def test_aging_lets_a_lower_priority_through_after_starvation_s() -> None:
    state = GroupState(residents={"h": 0.0})
    members = {"h": member("h", 100, since=0), "l": member("l", 1, since=0)}
    decide(members, state, POLICY, None, 0.0)
    assert decide(members, state, POLICY, None, 599.0).swaps == ()
    out = decide(members, state, POLICY, None, 600.0)
    assert [(s.winner, s.reason) for s in out.swaps] == [("l", "aging")]


def test_a_standing_want_without_queued_requests_takes_only_a_free_gpu() -> None:
    state = GroupState(residents={"a": 0.0})
    members = {"a": member("a", 1, last=0.0), "b": Member("b", 900, wants=True)}
    assert decide(members, state, POLICY, None, 1000.0).swaps == ()
    gone = {"a": Member("a", 1, last_demand=0.0), "b": Member("b", 900, wants=True)}
    out = decide(gone, state, POLICY, None, 1000.0)
    assert out.released == ("a",)
    assert out.granted == ("b",)
    assert out.swaps == ()


def swap_to_hi(state: GroupState) -> dict[str, Member]:
    """lo held the GPU from 0; hi (higher priority, queued since 10) took it at 400."""
    members = {"lo": member("lo", 1, since=0), "hi": member("hi", 9, since=10)}
    decide({"lo": members["lo"]}, state, POLICY, None, 0.0)
    out = decide(members, state, POLICY, None, 400.0)
    assert [(s.winner, s.losers, s.reason) for s in out.swaps] == [("hi", ("lo",), "priority")]
    assert state.loading == {"hi": {"lo": 0.0}}
    return members


def test_a_winner_that_crashes_while_loading_hands_the_gpu_back_without_a_cooldown() -> None:
    state = GroupState()
    members = swap_to_hi(state)
    crashed = {**members, "hi": member("hi", 9, since=10, blocked_until=402.0)}
    out = decide(crashed, state, POLICY, None, 401.0)
    assert [(s.winner, s.losers, s.reason) for s in out.swaps] == [("lo", ("hi",), "fallback")]
    assert out.released == ("hi",)
    assert out.granted == ("lo",)
    # lo holds as it held before the swap: since 0, so no fresh cooldown protects it...
    assert state.residents == {"lo": 0.0}
    assert state.preempted == {}
    assert state.loading == {}
    # ...and hi, waiting out its crash backoff, is told to look again when it ends.
    assert list(state.waiting) == ["hi"]
    assert out.recheck_s is not None
    assert 1.0 < out.recheck_s < 1.1
    assert decide(crashed, state, POLICY, None, 401.5).swaps == ()
    retried = decide(members, state, POLICY, None, 402.0)
    assert [(s.winner, s.losers) for s in retried.swaps] == [("hi", ("lo",))]


def test_a_winner_that_served_keeps_the_gpu_through_a_crash() -> None:
    state = GroupState()
    members = swap_to_hi(state)
    state.loading.pop("hi")  # its engine was Ready: the swap stands
    crashed = {**members, "hi": member("hi", 9, since=10, blocked_until=402.0)}
    out = decide(crashed, state, POLICY, None, 401.0)
    assert out.swaps == ()
    assert list(state.residents) == ["hi"]


def test_a_crash_looping_holder_releases_the_gpu_and_claims_nothing() -> None:
    state = GroupState()
    looping = member("a", 9, since=0, blocked_until=float("inf"))
    other = member("b", 1, since=0)
    decide({"a": member("a", 9, since=0)}, state, POLICY, None, 0.0)
    out = decide({"a": looping, "b": other}, state, POLICY, None, 5.0)
    assert out.released == ("a",)
    assert out.granted == ("b",)
    assert list(state.residents) == ["b"]
    assert out.recheck_s is None or out.recheck_s > 100  # no gate of a's to wait for


def test_a_fallback_skips_a_loser_that_no_longer_wants_the_gpu() -> None:
    state = GroupState()
    members = swap_to_hi(state)
    gone = {"lo": Member("lo", 1), "hi": member("hi", 9, since=10, blocked_until=402.0)}
    out = decide(gone, state, POLICY, None, 401.0)
    assert out.released == ("hi",)
    assert out.swaps == ()
    assert state.residents == {}
    assert members["lo"].wants
