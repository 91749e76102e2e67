"""Source selectors, their registry, and the accelerator compatibility rule."""

from __future__ import annotations

import contextlib
import logging
import random
from collections import Counter

import pytest

from flexinfer_transfer import SelectionTarget, SourceCandidate, create_selector
from flexinfer_transfer.accelerators import accelerators_compatible
from flexinfer_transfer.load_aware_selector import InFlightReads, LoadAwareSelector
from flexinfer_transfer.random_selector import RandomSelector
from flexinfer_transfer.rendezvous_selector import RendezvousSelector

SOURCES = [SourceCandidate(f"src{i:02d}", f"w{i}") for i in range(8)]


def _targets(n: int) -> list[SelectionTarget]:
    return [SelectionTarget("org/model", 0, f"t{i}") for i in range(n)]


def test_registry_names_and_unknown_falls_back_to_random(
    caplog: pytest.LogCaptureFixture,
) -> None:
    assert isinstance(create_selector("rendezvous_hash"), RendezvousSelector)
    assert isinstance(create_selector("load_aware"), LoadAwareSelector)
    assert isinstance(create_selector("random"), RandomSelector)
    with caplog.at_level(logging.WARNING):
        fallback = create_selector("round_robin")
    assert isinstance(fallback, RandomSelector)
    assert "unknown source selector 'round_robin'" in caplog.text


def test_random_is_a_permutation_from_a_local_rng() -> None:
    state = random.getstate()
    ordered = RandomSelector(random.Random(3)).order(SOURCES, _targets(1)[0])
    assert sorted(ordered, key=lambda c: c.key) == SOURCES
    assert ordered != SOURCES
    assert random.getstate() == state


def test_rendezvous_is_deterministic_spread_and_stable_under_removal() -> None:
    selector = RendezvousSelector()
    targets = _targets(400)
    first = {t.key: selector.order(SOURCES, t)[0] for t in targets}
    # Same answer from a fresh selector (blake2b, not the per-process salted hash()).
    assert first == {t.key: RendezvousSelector().order(SOURCES, t)[0] for t in targets}
    shares = Counter(c.key for c in first.values())
    assert len(shares) == len(SOURCES)
    assert max(shares.values()) < 2 * len(targets) / len(SOURCES)
    removed = SOURCES[0]
    rest = SOURCES[1:]
    moved = sum(
        1 for t in targets if first[t.key] != removed and selector.order(rest, t)[0] != first[t.key]
    )
    assert moved == 0  # only targets whose first choice disappeared move


def test_load_aware_prefers_the_least_loaded_and_counts_local_reads() -> None:
    loaded = [
        SourceCandidate("a", "w", source_load=3.0),
        SourceCandidate("b", "w", source_load=1.0),
        SourceCandidate("c", "w", source_load=None),
    ]
    reads = InFlightReads()
    selector = LoadAwareSelector(reads)
    target = _targets(1)[0]
    assert [c.mx_source_id for c in selector.order(loaded, target)] == ["c", "b", "a"]
    with reads.reading(loaded[2]), reads.reading(loaded[2]):
        assert [c.mx_source_id for c in selector.order(loaded, target)] == ["b", "c", "a"]
    assert reads.count(loaded[2]) == 0


def test_load_aware_spreads_a_fan_out_over_idle_sources() -> None:
    reads = InFlightReads()
    selector = LoadAwareSelector(reads)
    picks: Counter[str] = Counter()
    with contextlib.ExitStack() as held:
        for target in _targets(8):
            choice = selector.order(SOURCES[:4], target)[0]
            picks[choice.key] += 1
            held.enter_context(reads.reading(choice))
    assert sorted(picks.values()) == [2, 2, 2, 2]


@pytest.mark.parametrize(
    ("source", "target", "kwargs", "allowed"),
    [
        ("cuda", "CUDA:0", {"post_fetch": True}, True),  # same family: always
        ("cuda", "cuda", {"post_fetch": True, "quantization": "fp8", "dtype": "fp8"}, True),
        ("cuda", "xpu", {"post_fetch": True}, False),  # undeclared quantization: closed
        ("cuda", "xpu", {"post_fetch": True, "quantization": "", "dtype": "bf16"}, False),
        (
            "cuda",
            "xpu",
            {"post_fetch": True, "mx_source_type": 0, "quantization": "", "dtype": "bf16"},
            True,
        ),
        (
            "xpu",
            "cuda",
            {"post_fetch": True, "mx_source_type": 0, "quantization": "none", "dtype": "f16"},
            True,
        ),
        (
            "cuda",
            "xpu",
            {"post_fetch": True, "mx_source_type": 0, "quantization": "fp8", "dtype": "bf16"},
            False,
        ),
        (
            "cuda",
            "xpu",
            {"post_fetch": True, "mx_source_type": 0, "quantization": "", "dtype": "fp8_e4m3"},
            False,
        ),
        (
            "cuda",
            "xpu",
            {"post_fetch": True, "mx_source_type": 1, "quantization": "", "dtype": "bf16"},
            False,  # LoRA is not heterogeneous yet
        ),
        (
            "cuda",
            "rocm",
            {"post_fetch": True, "mx_source_type": 0, "quantization": "", "dtype": "bf16"},
            False,  # not an allowed pair
        ),
        ("", "cuda", {"post_fetch": False, "quantization": "fp8", "dtype": "bf16"}, True),
        ("", "cuda", {"post_fetch": True, "quantization": "fp8", "dtype": "bf16"}, False),
        ("", "cuda", {"post_fetch": True, "quantization": "", "dtype": "bf16"}, True),
    ],
)
def test_accelerator_compatibility(
    source: str, target: str, kwargs: dict[str, object], allowed: bool
) -> None:
    assert accelerators_compatible(source, target, **kwargs) is allowed  # type: ignore[arg-type]
