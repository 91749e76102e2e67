"""Fuzz the client's FileChunk decoder against protobuf's upb parser, for many examples.

The same property the registry's tests check for 300 examples
(``services/registry/tests/test_registry_chunk_fuzz.py``), run here for ``--examples``:
every generated message must be accepted by both parsers with the same fields, or
rejected by both. Prints how many were accepted and rejected and how long it took; exits 1
with the offending message on the first disagreement.

    python bench/fuzz_registry.py --examples 100000 [--seed 1]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter

from hypothesis import HealthCheck, Phase, given, seed, settings

from flexinfer_registry.testing.chunk_fuzz import differential, messages, protobuf_backend


def fuzz(examples: int, seed_value: int) -> tuple[Counter[str], float]:
    """(outcomes, seconds) of ``examples`` generated messages."""
    outcomes: Counter[str] = Counter()

    @seed(seed_value)
    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        phases=[Phase.generate, Phase.shrink],
        suppress_health_check=list(HealthCheck),
    )
    @given(messages)
    def run(message: bytes) -> None:
        outcomes[differential(message)] += 1

    started = time.perf_counter()
    run()
    return outcomes, time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=100_000, help="messages to generate")
    parser.add_argument("--seed", type=int, default=1, help="hypothesis seed (reproducible)")
    args = parser.parse_args()
    backend = protobuf_backend()
    if backend != "upb":
        print(f"protobuf backend is {backend!r}, not upb: the comparison would not be upb's")
        return 2
    try:
        outcomes, seconds = fuzz(args.examples, args.seed)
    except AssertionError as exc:
        print(f"DISAGREEMENT: {exc}")
        return 1
    total = sum(outcomes.values())
    print(f"{total} messages in {seconds:.1f} s ({total / seconds:.0f}/s, seed {args.seed}): "
          f"{outcomes['accepted']} accepted alike, {outcomes['rejected']} rejected alike, "
          "0 disagreements")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
