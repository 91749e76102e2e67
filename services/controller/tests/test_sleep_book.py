"""The sleep policy's bookkeeping (core/sleepbook.py) on a manual clock: the host-RAM
budget, least-recently-used eviction, the second timeout and the cost estimate."""

from __future__ import annotations

from pathlib import Path

import pytest

from flexinfer_controller.core.sharing.clock import ManualClock
from flexinfer_controller.core.sleepbook import SleepBook, SleepPolicy, host_cost_mb
from flexinfer_controller.sleep_settings import SleepSettings

POLICY = SleepPolicy(budget_mb=10_000, stop_after_s=600.0, process_mb=1000)


def book(policy: SleepPolicy = POLICY) -> tuple[SleepBook, ManualClock]:
    clock = ManualClock(100.0)
    return SleepBook(policy, clock), clock


def test_sleep_is_off_with_no_budget() -> None:
    sleepers, _ = book(SleepPolicy(budget_mb=0))
    assert sleepers.admit(1) is None
    assert not SleepPolicy().on
    assert SleepSettings().policy() == SleepPolicy()  # the documented defaults: off


def test_a_sleeper_larger_than_the_budget_is_never_admitted() -> None:
    sleepers, _ = book()
    sleepers.add("old", "default/a", 4000)
    assert sleepers.admit(10_001) is None
    assert sleepers.admit(10_000) == ["old"]


def test_the_least_recently_used_sleepers_make_room_first() -> None:
    sleepers, clock = book()
    for replica, model in (("r1", "default/a"), ("r2", "default/b"), ("r3", "default/c")):
        sleepers.add(replica, model, 3000)
        clock.advance(10)
    assert sleepers.used_mb == 9000
    assert sleepers.admit(1000) == []  # exactly the budget
    assert sleepers.admit(4000) == ["r1"]
    assert sleepers.admit(6000) == ["r1", "r2"]
    sleepers.remove("r1")  # woken: r2 is now the least recently used
    assert sleepers.admit(5000) == ["r2"]


def test_the_budget_is_per_node_each_sleeper_holds_its_own_nodes_host_ram() -> None:
    sleepers, clock = book()
    sleepers.add("n1-old", "default/a", 6000, "n1")
    clock.advance(10)
    sleepers.add("n2-old", "default/b", 6000, "n2")
    assert (sleepers.used_on("n1"), sleepers.used_on("n2"), sleepers.used_mb) == (6000, 6000, 12000)
    assert sleepers.admit(4000, "n1") == []  # n1 has room, whatever n2 holds
    assert sleepers.admit(5000, "n2") == ["n2-old"]  # only n2's own sleepers make room
    assert sleepers.admit(9000, "n3") == []
    assert "n1-old" in sleepers
    assert "n3-new" not in sleepers


def test_the_second_timeout_stops_each_sleeper_in_turn() -> None:
    sleepers, clock = book()
    sleepers.add("r1", "default/a", 1000)
    clock.advance(100)
    sleepers.add("r2", "default/a", 1000)
    sleepers.add("r3", "default/b", 1000)
    assert sleepers.due("default/a") == ([], 500.0)
    clock.advance(500)
    assert sleepers.due("default/a") == (["r1"], 100.0)
    sleepers.remove("r1")
    clock.advance(100)
    assert sleepers.due("default/a") == (["r2"], None)
    assert sleepers.due("default/c") == ([], None)


def test_sleepers_the_runtime_lost_are_forgotten() -> None:
    sleepers, _ = book()
    sleepers.add("r1", "default/a", 1000)
    sleepers.add("r2", "default/b", 2000)
    sleepers.retain({"r2"})
    assert sleepers.used_mb == 2000
    assert sleepers.remove("r1") is None


@pytest.mark.parametrize(
    ("level", "files", "estimate", "expected"),
    [
        (1, {"model.safetensors": 3 * 1024 * 1024 + 1, "config.json": 10**7}, None, 4 + 1000),
        (1, {}, 16_000, 16_000 + 1000),  # no weights known: the VRAM estimate
        (1, {}, None, 1000),
        (2, {"model.safetensors": 10**9}, 16_000, 1000),  # level 2 keeps no weights
    ],
)
def test_host_cost_is_the_weights_at_level_1_plus_the_process(
    tmp_path: Path, level: int, files: dict[str, int], estimate: int | None, expected: int
) -> None:
    for name, size in files.items():
        with (tmp_path / name).open("wb") as fh:
            fh.truncate(size)
    policy = SleepPolicy(budget_mb=1, level=level, process_mb=1000)
    assert host_cost_mb(policy, tmp_path, estimate) == expected
    assert host_cost_mb(policy, None, estimate) == (estimate or 0) * (level == 1) + 1000
